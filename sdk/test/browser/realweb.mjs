// The SDK on the real web, in real Chromium through the real pipeline, counting events
// tracked and events stored: an old page library's toJSON (Prototype 1.6) and stored state
// it wrote; a replaced global Event (MooTools), a Promise without finally and a patched
// fetch; a start with no inline script under `script-src 'self'`; a server-rendered page
// (bootstrap); a login (identify) that keeps the variant; and the error hook.
import { test } from "node:test";
import assert from "node:assert/strict";
import { EXP, FRONT, PARTS, PK, T, context, head, heroRoot, origin, rowsWhen, sampleFrames, site, sleep } from "./kit.mjs";

/** The experiments as the service serves them to this key (a server renders them). */
let served = [];

const autotrack = `<script src="${FRONT}/sdk/v1/split-autotrack.min.js"></script>`;

site((url) => {
  if (url.pathname.startsWith("/lib"))
    return `<!doctype html><html><head>${head({ extra: autotrack })}</head><body>${heroRoot}</body></html>`;
  if (url.pathname.startsWith("/old"))
    return `<!doctype html><html><head>${head()}</head><body>${heroRoot}</body></html>`;
  if (url.pathname === "/strict")
    return {
      headers: { "content-security-policy": `script-src 'self' ${FRONT}` },
      body: `<!doctype html><html><head><meta charset="utf-8">
<script src="${FRONT}/sdk/v1/split.min.js" data-base-url="${FRONT}" data-public-key="${PK}" data-experiment-ids="${EXP}" data-debug="1"></script>
</head><body>${heroRoot}</body></html>`,
    };
  if (url.pathname === "/rendered") {
    const variant = url.searchParams.get("v");
    const text = PARTS[variant].headline.replace(/</g, "&lt;").replace(/>/g, "&gt;");
    const rendered = heroRoot.replace("Original headline", text);
    const boot = `, bootstrap: ${JSON.stringify({ experiments: served, assignments: { [EXP]: variant } })}`;
    return `<!doctype html><html><head>${head({ init: boot })}</head><body>${rendered}</body></html>`;
  }
  if (url.pathname === "/hooked")
    return `<!doctype html><html><head>${head({ init: ", onError: (e) => window.hooked.push(String(e.message || e))" })}</head><body>${heroRoot}</body></html>`;
});

/** Every event of `visitor` stored, once `count` are. */
const stored = (visitor, count) =>
  rowsWhen(
    `${count} events of ${visitor}`,
    `SELECT event_name, variant_id, click_target FROM events FINAL WHERE visitor_id = '${visitor}' ORDER BY event_time`,
    (rows) => rows.length >= count,
    30,
  );

/** What escaped to the page: errors and unhandled rejections, from the document's start. */
const escapes = `window.escaped = [];
addEventListener("unhandledrejection", (e) => escaped.push("rejection: " + e.reason));
addEventListener("error", (e) => escaped.push("error: " + e.message));`;

test("Prototype 1.6's toJSON on arrays and strings: every event arrives, over two page views", T, async () => {
  // Prototype 1.6.0.3: Array#toJSON and String#toJSON return JSON text, so JSON.stringify
  // of an array gives a string; its stored state is then read by the next page.
  const prototype = `${escapes}
Array.prototype.toJSON = function () { return "[" + this.map((x) => JSON.stringify(x)).join(", ") + "]"; };
String.prototype.toJSON = function () { return '"' + this + '"'; };`;
  const { ctx } = await context(prototype);
  const page = await ctx.newPage();
  await page.goto(origin + "/old/one");
  await page.evaluate(() => window.splitReady);
  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  assert.equal(await page.locator("h1").textContent(), PARTS[variant].headline);
  await page.evaluate((e) => {
    for (let i = 0; i < 2; i++) Split.track("click", e, { clickTarget: "#one-" + i });
    return Split.flush();
  }, EXP);
  await page.goto(origin + "/old/two");
  await page.evaluate(() => window.splitReady);
  assert.equal(await page.evaluate((e) => Split.variant(e), EXP), variant, "the second page reads what the first stored");
  await page.evaluate((e) => {
    for (let i = 0; i < 2; i++) Split.track("click", e, { clickTarget: "#two-" + i });
    return Split.flush();
  }, EXP);
  assert.deepEqual(await page.evaluate(() => window.escaped), []);
  const visitor = await page.evaluate(() => localStorage.getItem("split_vid"));
  const rows = await stored(visitor, 6);
  assert.equal(rows.length, 6, JSON.stringify(rows));
  assert.ok(rows.every((r) => r.variant_id === variant), JSON.stringify(rows));
  await ctx.close();
});

test("stored state another script broke is rebuilt, never fatal: the events arrive", T, async () => {
  const broken = `${escapes}
localStorage.setItem("split_seen", JSON.stringify({ ${EXP}: JSON.stringify(["var_x", 1]) }));
localStorage.setItem("split_session", "{not json");
localStorage.setItem("split_kept", '"[{}]"');
localStorage.setItem("split_cache:${PK}:${EXP},exp_sdk_draft,exp_sdk_spa", '{"t": 1, "a": 1e12, "e": "[]"}');`;
  const { ctx } = await context(broken);
  const page = await ctx.newPage();
  await page.goto(origin + "/old/broken");
  await page.evaluate(() => window.splitReady);
  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  assert.ok(PARTS[variant], variant);
  assert.equal(await page.locator("h1").textContent(), PARTS[variant].headline);
  await page.evaluate((e) => Split.track("click", e, { clickTarget: "#after" }) || Split.flush(), EXP);
  assert.deepEqual(await page.evaluate(() => window.escaped), []);
  const visitor = await page.evaluate(() => localStorage.getItem("split_vid"));
  const rows = await stored(visitor, 2);
  assert.deepEqual(rows.map((r) => [r.event_name, r.variant_id]), [["impression", variant], ["click", variant]]);
  await ctx.close();
});

test("a replaced global Event (MooTools), a Promise without finally, a patched fetch: nothing lost, nothing raised", T, async () => {
  const old = `${escapes}
window.Event = function (e) { this.event = e; }; // MooTools 1.2's own Event class
delete Promise.prototype.finally;
const fetch0 = window.fetch;
window.fetch = function (...args) { return fetch0.apply(this, args).then((r) => r); };`;
  const { ctx } = await context(old);
  const page = await ctx.newPage();
  await page.goto(origin + "/lib/one");
  await page.evaluate(() => window.splitReady);
  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  await page.evaluate((e) => {
    for (let i = 0; i < 3; i++) Split.track("click", e, { clickTarget: "#lib-" + i });
    return Split.flush();
  }, EXP);
  // Two more at unload: they go by beacon, or the next page sends them.
  await page.evaluate((e) => {
    for (let i = 3; i < 5; i++) Split.track("click", e, { clickTarget: "#lib-" + i });
  }, EXP);
  await page.goto(origin + "/lib/two");
  await page.evaluate(() => window.splitReady);
  await page.evaluate(() => Split.flush());
  assert.deepEqual(await page.evaluate(() => window.escaped), []);
  const visitor = await page.evaluate(() => localStorage.getItem("split_vid"));
  // The auto-capture's measures of the first page, queued at its unload (split:unload).
  const rows = await rowsWhen(
    "the clicks and the first page's measures",
    `SELECT event_name, click_target FROM events FINAL WHERE visitor_id = '${visitor}' AND pathname = '/lib/one'`,
    (r) => r.filter((x) => x.event_name === "click").length >= 5 && r.some((x) => x.event_name === "dwell_time"),
    30,
  );
  const clicks = rows.filter((r) => r.event_name === "click").map((r) => r.click_target).sort();
  assert.deepEqual(clicks, ["#lib-0", "#lib-1", "#lib-2", "#lib-3", "#lib-4"]);
  assert.ok(rows.some((r) => r.event_name === "scroll_depth"), JSON.stringify(rows));
  await ctx.close();
});

test("no inline script under script-src 'self': the tag's data attributes start the SDK", T, async () => {
  const { ctx } = await context(`window.refused = [];
document.addEventListener("securitypolicyviolation", (e) => refused.push(e.violatedDirective + " " + e.blockedURI));`);
  const page = await ctx.newPage();
  await page.goto(origin + "/strict");
  await page.waitForFunction(() => localStorage.getItem("split_vid"), null, { timeout: 10_000 });
  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  assert.ok(PARTS[variant], variant);
  await page.waitForFunction((text) => document.querySelector("h1").textContent === text, PARTS[variant].headline, { timeout: 10_000 });
  await page.evaluate(() => Split.flush());
  assert.deepEqual(await page.evaluate(() => refused), [], "nothing refused by the CSP");
  const visitor = await page.evaluate(() => localStorage.getItem("split_vid"));
  const rows = await stored(visitor, 1);
  assert.deepEqual(rows.map((r) => [r.event_name, r.variant_id]), [["impression", variant]]);
  await ctx.close();
});

test("a server-rendered page (bootstrap): nothing fetched, no frame of another text, the same events", T, async () => {
  const answer = await fetch(FRONT + "/api/v1/experiments", { headers: { "X-public-key": PK } });
  served = (await answer.json()).experiments.filter((e) => e.id === EXP);
  assert.equal(served.length, 1);
  for (const variant of Object.keys(PARTS)) {
    const { ctx, gets } = await context(sampleFrames(1000));
    const page = await ctx.newPage();
    await page.goto(`${origin}/rendered?v=${variant}`);
    await page.evaluate(() => window.splitReady);
    assert.equal(await page.evaluate((e) => Split.variant(e), EXP), variant, "the server's assignment");
    await sleep(1000);
    const frames = await page.evaluate(() => frames_);
    assert.ok(frames.length > 20, `${frames.length} frames`);
    assert.deepEqual([...new Set(frames.map(([t]) => t))], [PARTS[variant].headline], JSON.stringify(frames.slice(0, 5)));
    assert.equal(await page.locator("h1").textContent(), PARTS[variant].headline);
    assert.equal(gets.length, 0, "nothing fetched");
    await page.evaluate((e) => Split.track("click", e, { clickTarget: "#rendered" }) || Split.flush(), EXP);
    const visitor = await page.evaluate(() => localStorage.getItem("split_vid"));
    const rows = await stored(visitor, 2);
    assert.deepEqual(rows.map((r) => [r.event_name, r.variant_id]), [["impression", variant], ["click", variant]]);
    await ctx.close();
  }
});

test("a login (identify) keeps the variant the visitor saw; the error hook hears of dropped events", T, async () => {
  const { ctx } = await context("window.hooked = [];");
  const page = await ctx.newPage();
  await page.goto(origin + "/hooked");
  await page.evaluate(() => window.splitReady);
  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  const anonymous = await page.evaluate(() => localStorage.getItem("split_vid"));
  const user = `user-${Date.now()}`;
  await page.evaluate((u) => Split.identify(u), user);
  assert.equal(await page.evaluate((e) => Split.variant(e), EXP), variant);
  await page.evaluate((e) => Split.convert(e, { clickTarget: "buy" }) || Split.flush(), EXP);
  const before = await stored(anonymous, 1);
  const after = await stored(user, 2);
  assert.deepEqual(before.map((r) => [r.event_name, r.variant_id]), [["impression", variant]]);
  assert.deepEqual(after.map((r) => [r.event_name, r.variant_id]), [["impression", variant], ["conversion", variant]]);
  // The service unreachable and 501 events: the oldest is dropped, and the hook is told.
  await ctx.route(FRONT + "/api/v1/analytics", (route) => route.abort());
  await page.evaluate((e) => {
    for (let i = 0; i < 501; i++) Split.track("click", e, { clickTarget: "#many" });
  }, EXP);
  assert.deepEqual(await page.evaluate(() => window.hooked), ["split: 1 events dropped: queue full"]);
  await ctx.close();
});

// Single-page views, consent, forced variants, another
// library's window.Split and the snippet that queues calls, in real Chromium
// through the real pipeline, each checked in ClickHouse.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  EXP, FRONT, PARTS, PK, T, context, eventually, head, heroRoot, open, origin, query, rowsWhen, sessionOf, site,
  sleep,
} from "./kit.mjs";

// A tiny router: pushState, then the view's render (/app/two holds an exp_sdk_spa root);
// the back button renders too.
const router = `<script>
const render = (path) => {
  document.getElementById("view").innerHTML = path.includes("two")
    ? '<div data-split-experiment="exp_sdk_spa"><h2 data-split-part="title">Spa original</h2></div>'
    : ${JSON.stringify(heroRoot)};
};
window.go = (path) => {
  history.pushState({}, "", path);
  render(path);
};
addEventListener("popstate", () => render(location.pathname));
</script>`;

const snippet = (name) => `<!doctype html><html><head><meta charset="utf-8">
<script async src="${FRONT}/sdk/v1/split.min.js"></script>
<script>!function(w,s){s=w.Split&&!w.Split.q?w.SplitTesting=w.SplitTesting||{q:[]}:w.Split=w.Split||{q:[]};"init track convert flush refresh setConsent".split(" ").map(function(m){s[m]=s[m]||function(){s.q.push([m,arguments])}})}(window);
${name}.init({ baseUrl: ${JSON.stringify(FRONT)}, publicKey: "${PK}" }); ${name}.track("click", "${EXP}", { clickTarget: "#queued" });</script>
</head><body>${heroRoot}</body></html>`;

site((url) => {
  if (url.pathname.startsWith("/app"))
    return `<!doctype html><html><head>${head()}${router}</head><body><main id="view">${heroRoot}</main></body></html>`;
  if (url.pathname === "/pending")
    return `<!doctype html><html><head>${head({ init: ', consent: "pending"' })}</head><body>${heroRoot}</body></html>`;
  if (url.pathname === "/denied")
    return `<!doctype html><html><head>${head({ init: ', consent: "denied"' })}</head><body>${heroRoot}</body></html>`;
  if (url.pathname === "/splitjs")
    return `<!doctype html><html><head><script>window.Split = function SplitJs(panes) { return { panes }; };</script>
${head().replace(/Split\.init/, "SplitTesting.init")}</head><body>${heroRoot}</body></html>`;
  if (url.pathname === "/snippet") return snippet("Split");
  if (url.pathname === "/snippet-splitjs")
    return snippet("SplitTesting").replace("<head>", '<head><script>window.Split = function SplitJs() {};</script>');
});

const rowsOf = (session) =>
  query(`SELECT event_name, experiment_id, variant_id, pathname, test, click_target FROM events FINAL
         WHERE session_id = '${session}' ORDER BY event_time`);

test("SPA: pushState, popstate and refresh() each start a view with its own impressions", T, async () => {
  const { ctx } = await context();
  const page = await open(ctx, "/app/one");
  const hero = await page.evaluate((e) => Split.variant(e), EXP);
  await page.evaluate(() => go("/app/two"));
  await eventually("the second view's parts", () =>
    page.evaluate(() => document.querySelector("h2")?.textContent.startsWith("Spa ") && document.querySelector("h2").textContent),
  );
  const spa = await page.evaluate(() => Split.variant("exp_sdk_spa"));
  assert.equal(await page.locator("h2").textContent(), spa === "var_sdk_spa_a" ? "Spa A" : "Spa B");
  await page.evaluate(() => Split.variant("exp_sdk_spa")); // no second impression in one view
  await page.goBack(); // popstate: a view
  await page.evaluate(() => go("/app/one")); // the same path again: the same view
  await page.evaluate(() => Split.refresh()); // a router that tells the SDK itself
  assert.equal(await page.locator("h1").textContent(), PARTS[hero].headline);
  const session = await sessionOf(page);
  await page.evaluate(() => Split.flush());
  const rows = await rowsWhen("the views' impressions", `SELECT 1 FROM events FINAL WHERE session_id = '${session}'`, (r) => r.length >= 4, 30);
  await sleep(500);
  const impressions = (await rowsOf(session)).filter((r) => r.event_name === "impression");
  assert.deepEqual(
    impressions.map((r) => [r.experiment_id, r.pathname]),
    [
      [EXP, "/app/one"],
      ["exp_sdk_spa", "/app/two"],
      [EXP, "/app/one"],
      [EXP, "/app/one"],
    ],
    JSON.stringify(rows),
  );
  await ctx.close();
});

test("consent pending: ids in memory, events queued; granted: stored and sent", T, async () => {
  const { ctx, posts } = await context();
  const page = await open(ctx, "/pending");
  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  assert.equal(await page.locator("h1").textContent(), PARTS[variant].headline, "variants shown while pending");
  await page.evaluate(() => Split.track("click", "exp_sdk_hero", { clickTarget: "#pending" }));
  await page.evaluate(() => Split.flush());
  await sleep(6000); // past the 5 s timer
  assert.equal(posts.length, 0, "nothing sent while pending");
  const stored = () => page.evaluate(() => Object.keys(localStorage).filter((k) => k.startsWith("split_")));
  assert.deepEqual(await stored(), [], "nothing stored while pending");
  await page.evaluate(() => Split.setConsent("granted"));
  assert.deepEqual((await stored()).sort(), ["split_consent", "split_seen", "split_session", "split_vid"]);
  const session = await sessionOf(page);
  const rows = await rowsWhen("the queued events", `SELECT event_name FROM events FINAL WHERE session_id = '${session}'`, (r) => r.length === 2, 20);
  assert.deepEqual(rows.map((r) => r.event_name).sort(), ["click", "impression"]);
  await ctx.close();
});

test("consent denied: original text, nothing stored or sent; withdrawn later: originals back", T, async () => {
  const { ctx, posts } = await context();
  const page = await open(ctx, "/denied");
  assert.equal(await page.locator("h1").textContent(), "Original headline");
  assert.equal(await page.locator("h1").evaluate((e) => getComputedStyle(e).visibility), "visible");
  assert.equal(await page.evaluate((e) => Split.variant(e), EXP), null);
  await page.evaluate(async () => {
    Split.track("click", "exp_sdk_hero", { clickTarget: "#denied" });
    await Split.flush();
  });
  assert.deepEqual(await page.evaluate(() => Object.keys(localStorage)), ["split_consent"], "the decision only");

  // A visitor who granted, then withdraws: the queue is dropped, the page shows the original.
  const second = await open(ctx, "/landing");
  await second.evaluate(() => {
    Split.track("click", "exp_sdk_hero", { clickTarget: "#withdrawn" });
    Split.setConsent("denied");
  });
  assert.equal(await second.locator("h1").textContent(), "Original headline");
  assert.deepEqual(await second.evaluate(() => Object.keys(localStorage).filter((k) => k.startsWith("split_"))), ["split_consent"]);
  await second.goto(origin + "/landing?after"); // unload: nothing goes
  await second.evaluate(() => window.splitReady);
  // The next page (consent granted again) sends its impression: once it is stored, the
  // pipeline has had the time to store anything sent before it.
  const after = await sessionOf(second);
  await second.evaluate(() => Split.flush());
  await rowsWhen("the next page's impression", `SELECT 1 FROM events FINAL WHERE session_id = '${after}'`, (r) => r.length === 1, 20);
  const sent = posts.flatMap((p) => p.events).map((e) => e.clickTarget);
  assert.ok(!sent.includes("#denied") && !sent.includes("#withdrawn"), JSON.stringify(sent));
  const rows = await query("SELECT click_target FROM events FINAL WHERE click_target IN ('#denied', '#withdrawn')");
  assert.deepEqual(rows, []);
  await ctx.close();
});

test("?split_force forces a variant for the tab, marks its events test; assignments() lists it", T, async () => {
  const { ctx } = await context();
  for (const forced of ["var_sdk_a", "var_sdk_b"]) {
    const page = await open(ctx, `/landing?split_force=${EXP}:${forced}`);
    assert.equal(await page.evaluate((e) => Split.variant(e), EXP), forced);
    assert.equal(await page.locator("h1").textContent(), PARTS[forced].headline);
    const next = await ctx.newPage(); // another tab: not forced
    await next.goto(origin + "/landing");
    await next.evaluate(() => window.splitReady);
    assert.equal(await next.evaluate(() => sessionStorage.getItem("split_force")), null);
    await next.close();
    await page.goto(origin + "/landing"); // the same tab, no parameter: still forced
    await page.evaluate(() => window.splitReady);
    const [variant, list] = await page.evaluate((e) => [Split.variant(e), Split.assignments()], EXP);
    assert.equal(variant, forced);
    assert.deepEqual(list.find((a) => a.experimentId === EXP), {
      experimentId: EXP, variantId: forced, phase: 1, forced: true, shown: true,
    });
    const session = await sessionOf(page);
    await page.evaluate(() => Split.flush());
    // The other tab's impression (its own variant, not forced) is not a test event.
    await rowsWhen(
      "the forced tab's two impressions, marked test",
      `SELECT 1 FROM events FINAL WHERE session_id = '${session}' AND event_name = 'impression'
       AND variant_id = '${forced}' AND test = 1`,
      (r) => r.length === 2,
      20,
    );
    await page.close();
  }
  await ctx.close();
});

test("another library's window.Split is left alone: the SDK lives at window.SplitTesting", T, async () => {
  const { ctx } = await context();
  const page = await open(ctx, "/splitjs");
  assert.equal(await page.evaluate(() => Split.name), "SplitJs");
  const variant = await page.evaluate((e) => SplitTesting.variant(e), EXP);
  assert.equal(await page.locator("h1").textContent(), PARTS[variant].headline);
  const session = await sessionOf(page);
  await page.evaluate(() => SplitTesting.flush());
  await rowsWhen("its impression", `SELECT 1 FROM events FINAL WHERE session_id = '${session}'`, (r) => r.length === 1, 20);
  await ctx.close();
});

test("the two-line snippet queues calls made before the script loads", T, async () => {
  for (const [path, name] of [["/snippet", "Split"], ["/snippet-splitjs", "SplitTesting"]]) {
    const { ctx } = await context();
    await ctx.route(FRONT + "/sdk/v1/split.min.js", async (route) => {
      await sleep(1000); // the script comes after the page's calls
      await route.continue();
    });
    const page = await ctx.newPage();
    await page.goto(origin + path);
    await eventually("the SDK", () => page.evaluate((n) => typeof window[n].variant === "function", name), 10);
    await eventually("its session", () => page.evaluate(() => localStorage.getItem("split_session")), 10);
    const session = await sessionOf(page);
    await page.evaluate((n) => window[n].flush(), name);
    const rows = await rowsWhen(
      "the queued click and the impression",
      `SELECT event_name, click_target FROM events FINAL WHERE session_id = '${session}'`,
      (r) => r.length === 2,
      20,
    );
    assert.deepEqual(rows.map((r) => r.event_name).sort(), ["click", "impression"], path);
    await ctx.close();
  }
});

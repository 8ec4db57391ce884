// The SDK in real headless Chromium (Debian's), against the real pipeline that
// e2e/tests/sdk.rs starts: FRONT (nginx before ingest and config-api, serving the SDK),
// CLICKHOUSE_URL and CLICKHOUSE_DATABASE (where the consumer stores events), ACCESS_LOG
// (the front's). The fixture pages come from another origin, as on a real site.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const { FRONT, CLICKHOUSE_URL, CLICKHOUSE_DATABASE, ACCESS_LOG } = process.env;
const PK = "pk_sdk";
const EXP = "exp_sdk_hero";
const PARTS = {
  var_sdk_a: { headline: "Alpha <b>headline</b>", cta: "Buy A" },
  var_sdk_b: { headline: "Beta <b>headline</b>", cta: "Buy B" },
};

const fixture = `<!doctype html><html><head><meta charset="utf-8">
<script src="${FRONT}/sdk/v1/split.min.js"></script>
<script>window.splitReady = Split.init({ baseUrl: ${JSON.stringify(FRONT)}, publicKey: "${PK}",
  experimentIds: ["${EXP}", "exp_sdk_draft"], debug: true });</script>
</head><body><div data-split-experiment="${EXP}">
<h1 data-split-part="headline">Original headline</h1>
<button data-split-part="cta">Original</button><p data-split-part="missing">Kept</p>
</div></body></html>`;

let server, origin, browser;
/** Each test's time limit: a hung browser or page fails its test instead of the run. */
const T = { timeout: 120_000 };

before(async () => {
  assert.ok(FRONT && CLICKHOUSE_URL && CLICKHOUSE_DATABASE && ACCESS_LOG, "run me from e2e/tests/sdk.rs");
  server = http.createServer((req, res) => {
    res.setHeader("content-type", "text/html; charset=utf-8");
    res.end(req.url.startsWith("/next") ? "<p>next page</p>" : fixture);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  origin = `http://127.0.0.1:${server.address().port}`;
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
}, T);

after(async () => {
  await browser?.close();
  server?.close();
}, T);

/**
 * A new browser context (its own storage); `gets` and `posts` record the config GETs and
 * the standard-form POSTs ({ headers, events, sentAt, at }) of this context only, so that
 * each test checks its own requests and runs alone as well as with the others.
 */
async function context(init) {
  const ctx = await browser.newContext();
  if (init) await ctx.addInitScript(init);
  const gets = [];
  const posts = [];
  ctx.on("request", (r) => {
    if (r.url() === FRONT + "/api/v1/experiments" && r.method() === "GET") gets.push(r.headers());
    if (r.url() === FRONT + "/api/v1/analytics" && r.method() === "POST" && r.headers()["x-public-key"]) {
      const body = JSON.parse(r.postData());
      posts.push({ headers: r.headers(), events: body.events, sentAt: body.sentAt, at: Date.now() });
    }
  });
  return { ctx, gets, posts };
}

async function open(ctx, path = "/landing?utm_source=news&utm_campaign=launch") {
  const page = await ctx.newPage();
  page.on("console", (m) => console.log("  [page]", m.text()));
  await page.goto(origin + path);
  await page.evaluate(() => window.splitReady);
  return page;
}

async function query(sql) {
  const r = await fetch(`${CLICKHOUSE_URL}/?database=${CLICKHOUSE_DATABASE}`, {
    method: "POST",
    body: sql + " FORMAT JSONEachRow",
  });
  const text = await r.text();
  assert.ok(r.ok, text);
  return text.split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

async function eventually(what, probe, seconds = 60) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = await probe();
    if (value) return value;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("one GET with the contract's headers; parts applied as text; sticky and cached", T, async () => {
  const { ctx, gets } = await context();
  const page = await open(ctx);
  assert.equal(gets.length, 1, "exactly one GET per init");
  assert.equal(gets[0]["x-public-key"], PK);
  assert.equal(gets[0]["accept"], "application/json");
  assert.equal(gets[0]["x-experiment-ids"], `${EXP},exp_sdk_draft`);
  assert.equal(gets[0]["x-service-test"], undefined);

  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  assert.ok(PARTS[variant], variant);
  const h1 = page.locator("h1");
  assert.equal(await h1.textContent(), PARTS[variant].headline);
  assert.match(await h1.innerHTML(), /&lt;b&gt;/, "text, never HTML");
  assert.equal(await page.locator("button").textContent(), PARTS[variant].cta);
  assert.equal(await page.locator("p").textContent(), "Kept");
  assert.equal(await h1.evaluate((e) => getComputedStyle(e).visibility), "visible");
  assert.equal(await page.evaluate(() => Split.variant("exp_sdk_draft")), null, "the live gate holds");

  // The next page view: the same variant, applied from the cache before the answer.
  await ctx.route(FRONT + "/api/v1/experiments", async (route) => {
    await sleep(3000);
    await route.continue();
  });
  const second = await ctx.newPage();
  await second.goto(origin + "/landing");
  await second.waitForFunction(() => document.querySelector("h1").textContent !== "Original headline", null, {
    timeout: 2000,
  });
  assert.equal(await second.locator("h1").textContent(), PARTS[variant].headline);
  await second.evaluate(() => window.splitReady);
  assert.equal(await second.evaluate((e) => Split.variant(e), EXP), variant);
  await ctx.close();
});

test("parts whose answer is late show their original text after the failsafe", T, async () => {
  const { ctx } = await context();
  await ctx.route(FRONT + "/api/v1/experiments", async (route) => {
    await sleep(4000);
    await route.continue();
  });
  const page = await ctx.newPage();
  await page.goto(origin + "/landing");
  const hidden = () => page.locator("h1").evaluate((e) => getComputedStyle(e).visibility);
  assert.equal(await hidden(), "hidden", "parts wait for their text");
  assert.equal(await page.locator("body").evaluate((e) => getComputedStyle(e).visibility), "visible");
  await sleep(1200);
  assert.equal(await hidden(), "visible");
  assert.equal(await page.locator("h1").textContent(), "Original headline");
  await ctx.close();
});

test("5 queued events go at once in one POST; 4 go after 5 s", T, async () => {
  const { ctx, posts } = await context();
  const page = await open(ctx);
  const start = posts.length;
  // The impression of the applied parts is the first of five.
  await page.evaluate(() => {
    for (let i = 0; i < 4; i++) Split.track("click", "exp_sdk_hero", { clickTarget: `#five-${i}` });
  });
  await eventually("the batch of 5", () => posts.length === start + 1, 3);
  const first = posts[start];
  assert.equal(first.events.length, 5);
  assert.equal(first.headers["content-type"], "application/json");
  assert.equal(first.headers["accept"], "application/json");
  assert.equal(first.events[0].eventName, "impression");
  for (const e of first.events) {
    assert.match(e.eventId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(e.pathname, "/landing");
    assert.equal(e.referrer, "");
    assert.equal(e.utm_source, "news");
    assert.equal(e.utm_campaign, "launch");
    assert.ok(PARTS[e.variantId]);
    assert.equal(e.test, undefined);
  }
  const queued = Date.now();
  await page.evaluate(() => {
    for (let i = 0; i < 3; i++) Split.track("scroll_depth", "exp_sdk_hero", { scrollDepth: 10 * i });
    Split.convert("exp_sdk_hero", { clickTarget: "#buy" });
  });
  await sleep(3000);
  assert.equal(posts.length, start + 1, "4 events wait for the timer");
  await eventually("the timed batch", () => posts.length === start + 2, 8);
  assert.ok(posts[start + 1].at - queued >= 4500, `${posts[start + 1].at - queued} ms`);
  const timed = posts[start + 1].events;
  assert.equal(timed.length, 4);
  assert.deepEqual(timed[3], { ...timed[3], eventName: "conversion", conversion: true });
  await ctx.close();
});

test("page unload: the rest goes by beacon, a text body with pkey, no preflight", T, async () => {
  const { ctx } = await context();
  const page = await open(ctx);
  const logBefore = readFileSync(ACCESS_LOG, "utf8").split("\n").length;
  await page.evaluate(() => {
    Split.track("click", "exp_sdk_hero", { clickTarget: "#beacon-1" });
    Split.track("click", "exp_sdk_hero", { clickTarget: "#beacon-2" });
  });
  await page.goto(origin + "/next");
  const rows = await eventually("the beacon's events in ClickHouse", async () => {
    const rows = await query(
      "SELECT toString(event_id) AS id, click_target, pathname, utm_source FROM events FINAL " +
        "WHERE click_target IN ('#beacon-1', '#beacon-2')",
    );
    return rows.length === 2 && rows;
  });
  assert.ok(rows.every((r) => r.pathname === "/landing" && r.utm_source === "news"));
  const analytics = readFileSync(ACCESS_LOG, "utf8")
    .split("\n")
    .slice(logBefore - 1)
    .filter((l) => l.includes("/api/v1/analytics"));
  assert.ok(analytics.some((l) => l.includes('"POST /api/v1/analytics') && l.includes('" 202 ')), analytics.join("\n"));
  assert.ok(!analytics.some((l) => l.includes('"OPTIONS ')), "no preflight:\n" + analytics.join("\n"));
  await ctx.close();
});

test("test mode: X-service-test, the live gate bypassed, every event test: true", T, async () => {
  const { ctx, gets } = await context(() => localStorage.setItem("service_test", "true"));
  const page = await open(ctx);
  assert.equal(gets[0]["x-service-test"], "true");
  assert.equal(await page.evaluate(() => Split.variant("exp_sdk_draft")), "var_sdk_only");
  const session = await page.evaluate(async () => {
    Split.track("click", "exp_sdk_draft", { clickTarget: "#test-mode" });
    await Split.flush();
    return JSON.parse(localStorage.getItem("split_session")).id;
  });
  const rows = await eventually("test events in ClickHouse", async () => {
    const rows = await query(`SELECT event_name, test FROM events FINAL WHERE session_id = '${session}'`);
    return rows.length >= 3 && rows;
  });
  assert.ok(rows.every((r) => r.test === 1), JSON.stringify(rows));
  await ctx.close();
});

test("a batch answered 503 is retried with the same eventIds and counted once", T, async () => {
  const { ctx, posts } = await context();
  let reached = 0; // the status the service gave the attempt the browser saw fail
  await ctx.route(FRONT + "/api/v1/analytics", async (route) => {
    if (route.request().method() !== "POST" || reached) return route.continue();
    reached = (await route.fetch()).status(); // the service stores it; the browser sees a 503
    await route.fulfill({
      status: 503,
      headers: { "content-type": "application/json", "access-control-allow-origin": origin },
      body: '{"error":{"code":"unavailable","message":"Try again."}}',
    });
  });
  const page = await open(ctx);
  const start = posts.length;
  const session = await page.evaluate(async () => {
    for (let i = 0; i < 4; i++) Split.track("click", "exp_sdk_hero", { clickTarget: "#retry" });
    await Split.flush();
    return JSON.parse(localStorage.getItem("split_session")).id;
  });
  assert.equal(reached, 202, "the failed attempt reached the service");
  const attempts = posts.slice(start).map((p) => p.events.map((e) => e.eventId).join());
  assert.equal(attempts.length, 2);
  assert.equal(attempts[0], attempts[1], "the retry carries the same events and ids");
  // Both attempts were stored; FINAL counts each event once (a background merge may
  // already have collapsed the copies, so the raw count is not checked).
  const rows = await eventually("the events in ClickHouse", async () => {
    const rows = await query(
      `SELECT toString(event_id) AS id FROM events FINAL WHERE session_id = '${session}'`,
    );
    return rows.length >= 5 && rows;
  });
  assert.equal(rows.length, 5);
  await ctx.close();
});

test("blocked storage and wrong calls: the page keeps working, events still go", T, async () => {
  const { ctx, posts } = await context(() => {
    Object.defineProperty(window, "localStorage", {
      get() {
        throw new DOMException("The operation is insecure.", "SecurityError");
      },
    });
  });
  const page = await ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(origin + "/landing");
  await page.evaluate(() => window.splitReady);
  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  assert.ok(PARTS[variant]);
  assert.equal(await page.locator("h1").textContent(), PARTS[variant].headline);
  const start = posts.length;
  const thrown = await page.evaluate(async () => {
    try {
      Split.track(undefined, null, 42);
      Split.variant(undefined);
      Split.convert("exp_sdk_hero", "not an object");
      await Split.init(null);
      await Split.flush();
      return null;
    } catch (e) {
      return String(e);
    }
  });
  assert.equal(thrown, null, "no call throws into the page");
  assert.deepEqual(errors, []);
  await eventually("the events of a page without storage", () => posts.length > start, 10);
  await ctx.close();
});

test("every event the browsers sent is in analytics.events with its fields", T, async () => {
  // This test's own events: five at once (the impression and four clicks), four after the
  // 5 s timer (scroll depths and a conversion), and a test-mode page's flushed events.
  const { ctx, posts } = await context();
  const page = await open(ctx);
  await page.evaluate(() => {
    for (let i = 0; i < 4; i++) Split.track("click", "exp_sdk_hero", { clickTarget: `#fields-${i}` });
  });
  await eventually("the batch of 5", () => posts.length === 1, 3);
  await page.evaluate(() => {
    for (let i = 0; i < 3; i++) Split.track("scroll_depth", "exp_sdk_hero", { scrollDepth: 25 * (i + 1) });
    Split.convert("exp_sdk_hero", { clickTarget: "#fields-buy" });
  });
  await eventually("the timed batch", () => posts.length === 2, 10);
  const testMode = await context(() => localStorage.setItem("service_test", "true"));
  const testPage = await open(testMode.ctx);
  await testPage.evaluate(async () => {
    Split.track("click", "exp_sdk_draft", { clickTarget: "#fields-test" });
    await Split.flush();
  });
  await eventually("the test-mode batch", () => testMode.posts.length === 1, 10);
  await ctx.close();
  await testMode.ctx.close();

  const sent = [...posts, ...testMode.posts].flatMap((p) => p.events.map((e) => ({ ...e, sentAt: p.sentAt })));
  assert.deepEqual(posts.map((p) => p.events.length), [5, 4]);
  assert.ok(sent.some((e) => e.test) && sent.some((e) => !e.test), "events in and out of test mode");
  const ids = sent.map((e) => `'${e.eventId}'`).join(",");
  const rows = await eventually("every sent event", async () => {
    const rows = await query(
      "SELECT toString(event_id) AS event_id, event_name, experiment_id, session_id, variant_id, " +
        "conversion, scroll_depth, click_target, pathname, referrer, utm_source, utm_campaign, test, " +
        "received_at_ms, event_time " +
        `FROM events FINAL WHERE event_id IN (${ids})`,
    );
    return rows.length === new Set(sent.map((e) => e.eventId)).size && rows;
  });
  const byId = Object.fromEntries(rows.map((r) => [r.event_id, r]));
  for (const e of sent) {
    const r = byId[e.eventId];
    assert.deepEqual(
      [r.event_name, r.experiment_id, r.session_id, r.variant_id, r.pathname, r.referrer, r.utm_source, r.utm_campaign],
      [
        e.eventName,
        e.experimentId,
        e.sessionId,
        e.variantId ?? "",
        e.pathname,
        e.referrer,
        e.utm_source ?? "",
        e.utm_campaign ?? "",
      ],
    );
    assert.equal(r.click_target, e.clickTarget ?? "");
    assert.equal(r.conversion, e.conversion === undefined ? null : Number(e.conversion));
    assert.equal(r.scroll_depth, e.scrollDepth ?? null);
    assert.equal(r.test, e.test ? 1 : 0);
    // The event's time: the browser's timestamp moved by its clock's offset at sending.
    // Browser and service share this machine's clock, so it is the timestamp give or take
    // the request's way; events that waited for the 5 s timer were received well after.
    assert.equal(typeof e.timestamp, "number");
    const [time, received] = [Number(r.event_time), Number(r.received_at_ms)];
    assert.ok(time <= received && Math.abs(time - e.timestamp) < 1000, `${e.eventId}: ${time}`);
  }
  const waited = sent.filter((e) => e.sentAt - e.timestamp > 3000);
  assert.ok(waited.length > 0, "some events waited for the timer");
});

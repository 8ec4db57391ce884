// The core in real headless Chromium against the real pipeline (see kit.mjs): the answer,
// the parts without flicker or late swap, batches, beacons, retries,
// test mode, blocked storage, and every field of every event in ClickHouse.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import {
  ACCESS_LOG, EXP, FRONT, PARTS, PK, T, context, eventually, head, heroRoot, open, origin, query, rowsWhen,
  sessionOf, site, sleep,
} from "./kit.mjs";

site((url) => {
  if (url.pathname.startsWith("/next")) return "<p>next page</p>";
  // An event tracked in the head, before any answer.
  if (url.pathname === "/early")
    return `<!doctype html><html><head>${head()}
<script>Split.track("click", "${EXP}", { clickTarget: "#early" });</script></head><body>${heroRoot}</body></html>`;
  // A page whose body comes 1.5 s after its head (the answer arrives while it parses),
  // and whose end comes a second after its experiment.
  if (url.pathname === "/slow")
    return [`<!doctype html><html><head>${head()}</head><body>`, 1500, heroRoot, 1000, "<p>end</p></body></html>"];
});


test("one GET with the contract's headers; parts applied as text; sticky and cached", T, async () => {
  const { ctx, gets } = await context();
  const page = await open(ctx);
  assert.equal(gets.length, 1, "exactly one GET per init");
  assert.equal(gets[0]["x-public-key"], PK);
  assert.equal(gets[0]["accept"], "application/json");
  assert.equal(gets[0]["x-experiment-ids"], `${EXP},exp_sdk_draft,exp_sdk_spa`);
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

test("an answer after the failsafe: the original text stays, no impression, events without variant", T, async () => {
  const { ctx, posts } = await context();
  await ctx.route(FRONT + "/api/v1/experiments", async (route) => {
    await sleep(3000);
    await route.continue();
  });
  const page = await ctx.newPage();
  await page.goto(origin + "/landing");
  const visibility = () => page.locator("h1").evaluate((e) => getComputedStyle(e).visibility);
  assert.equal(await visibility(), "hidden", "parts wait for their text");
  assert.equal(await page.locator("body").evaluate((e) => getComputedStyle(e).visibility), "visible");
  await sleep(1200);
  assert.equal(await visibility(), "visible");
  assert.equal(await page.locator("h1").textContent(), "Original headline");
  await page.evaluate(() => Split.track("click", "exp_sdk_hero", { clickTarget: "#late-before" }));
  await page.evaluate(() => window.splitReady); // the answer came, late
  assert.equal(await page.locator("h1").textContent(), "Original headline", "no late swap");
  assert.equal(await page.evaluate((e) => Split.variant(e), EXP), null, "this view has no variant");
  const session = await sessionOf(page);
  await page.evaluate(async () => {
    Split.track("click", "exp_sdk_hero", { clickTarget: "#late-after" });
    await Split.flush();
  });
  const rows = await rowsWhen(
    "the late page's clicks",
    `SELECT event_name, variant_id, click_target FROM events FINAL WHERE session_id = '${session}'`,
    (rows) => rows.length >= 2,
  );
  await sleep(1000);
  assert.deepEqual((await query(`SELECT event_name FROM events FINAL WHERE session_id = '${session}'`)).length, 2);
  assert.deepEqual(rows.map((r) => [r.event_name, r.variant_id]).sort(), [["click", ""], ["click", ""]]);
  assert.ok(posts.flatMap((p) => p.events).every((e) => e.eventName !== "impression"), "no impression sent");
  await ctx.close();
});

test("an answer before the page is parsed: no part is ever seen with its original text", T, async () => {
  // Each animation frame records what the headline shows; the answer arrives (cached by
  // the HTTP cache of a first view, or not) while the body is still on its way.
  const { ctx } = await context(() => {
    window.frames_ = [];
    const look = () => {
      const h1 = document.querySelector("h1");
      if (h1) frames_.push([h1.textContent, getComputedStyle(h1).visibility]);
      if (document.readyState !== "complete" || frames_.length < 30) requestAnimationFrame(look);
    };
    requestAnimationFrame(look);
  });
  for (const view of ["first", "repeat"]) {
    const page = await ctx.newPage();
    await page.goto(origin + "/slow");
    await page.evaluate(() => window.splitReady);
    const variant = await page.evaluate((e) => Split.variant(e), EXP);
    const frames = await page.evaluate(() => frames_);
    assert.ok(frames.length > 0, "frames were seen");
    const shown = frames.filter(([, v]) => v === "visible").map(([t]) => t);
    assert.ok(!shown.includes("Original headline"), `${view}: original text seen: ${JSON.stringify(frames)}`);
    assert.equal(await page.locator("h1").textContent(), PARTS[variant].headline);
    await page.close();
  }
  await ctx.close();
});

test("an event tracked before the answer is held until it, and gets the variant and phase", T, async () => {
  const { ctx, posts } = await context();
  await ctx.route(FRONT + "/api/v1/experiments", async (route) => {
    await sleep(300);
    await route.continue();
  });
  const page = await open(ctx, "/early");
  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  const session = await sessionOf(page);
  await page.evaluate(() => Split.flush());
  const rows = await rowsWhen(
    "the early click",
    `SELECT variant_id, phase FROM events FINAL WHERE session_id = '${session}' AND event_name = 'click'`,
    (r) => r.length === 1,
    20,
  );
  assert.deepEqual(rows, [{ variant_id: variant, phase: 1 }]);
  const early = posts.flatMap((p) => p.events).find((e) => e.clickTarget === "#early");
  assert.equal(early.variantId, variant);
  await ctx.close();
});

test("experiment roots added later are applied, one impression per experiment and view", T, async () => {
  const { ctx, posts } = await context();
  const page = await open(ctx);
  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  const text = await page.evaluate(async (exp) => {
    const root = document.createElement("section");
    root.setAttribute("data-split-experiment", exp);
    root.innerHTML = '<h2 data-split-part="cta">Added original</h2>';
    document.body.appendChild(root);
    await new Promise((r) => requestAnimationFrame(r));
    return [root.firstChild.textContent, getComputedStyle(root.firstChild).visibility];
  }, EXP);
  assert.deepEqual(text, [PARTS[variant].cta, "visible"]);
  const session = await sessionOf(page);
  await page.evaluate(() => Split.flush());
  const rows = await rowsWhen(
    "the impression",
    `SELECT event_name, variant_id FROM events FINAL WHERE session_id = '${session}'`,
    (rows) => rows.length >= 1,
  );
  assert.deepEqual(rows, [{ event_name: "impression", variant_id: variant }]);
  assert.equal(posts.flatMap((p) => p.events).length, 1);
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
        "visitor_id, phase, is_bot, " +
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
    // The visitor, the unit of the results, and the phase the variant was assigned in.
    assert.equal(r.visitor_id, e.visitorId);
    assert.equal(r.phase, e.phase ?? 1);
    assert.equal(r.is_bot, 0, "a browser's User-Agent is no bot's");
    if (e.variantId) assert.equal(e.phase, 1, "events of an assigned experiment carry its phase");
    // The event's time: the browser's timestamp moved by its clock's offset at sending.
    // Browser and service share this machine's clock, so it is the timestamp give or take
    // the request's way; events that waited for the 5 s timer were received well after.
    assert.equal(typeof e.timestamp, "number");
    const [time, received] = [Number(r.event_time), Number(r.received_at_ms)];
    assert.ok(time <= received && Math.abs(time - e.timestamp) < 1000, `${e.eventId}: ${time}`);
  }
  assert.equal(new Set(posts.flatMap((p) => p.events).map((e) => e.visitorId)).size, 1, "one visitor per browser");
  assert.match(sent[0].visitorId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  const waited = sent.filter((e) => e.sentAt - e.timestamp > 3000);
  assert.ok(waited.length > 0, "some events waited for the timer");
});

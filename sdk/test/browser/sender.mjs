// The lossless sender in real Chromium through the real pipeline:
// nothing stranded by a send at five, a large body sent without keepalive, unload bodies
// within the browser's 64 KiB and the rest sent by the next page view, 408 retried.
import { test } from "node:test";
import assert from "node:assert/strict";
import { FRONT, T, context, eventually, open, origin, rowsWhen, sessionOf, site } from "./kit.mjs";

site((url) => (url.pathname.startsWith("/next") ? "<p>next page</p>" : undefined));

test("seven synchronous events: five at once, the other two within 5 s, none stranded", T, async () => {
  const { ctx, posts } = await context();
  const page = await open(ctx);
  const start = posts.length; // the impression waits for its batch
  const queued = Date.now();
  await page.evaluate(() => {
    for (let i = 0; i < 6; i++) Split.track("click", "exp_sdk_hero", { clickTarget: `#seven-${i}` });
  });
  await eventually("the batch of five", () => posts.length >= start + 1, 3);
  await eventually("the other two, by the timer (no flush)", () => posts.length >= start + 2, 8);
  assert.ok(posts[start + 1].at - queued <= 6500, `${posts[start + 1].at - queued} ms`);
  assert.deepEqual(posts.slice(start).map((p) => p.events.length), [5, 2]);
  const session = await sessionOf(page);
  await rowsWhen(
    "the seven events",
    `SELECT event_name FROM events FINAL WHERE session_id = '${session}'`,
    (rows) => rows.length === 7,
  );
  await ctx.close();
});

test("a batch of 96 KB of UTF-8 (48 K UTF-16 units) goes without keepalive and lands", T, async () => {
  const { ctx } = await context();
  const page = await open(ctx);
  const session = await sessionOf(page);
  // Unknown fields are ignored by the ingest: `pad` only makes the body large.
  await page.evaluate(async () => {
    for (let i = 0; i < 4; i++) Split.track("click", "exp_sdk_hero", { clickTarget: `#big-${i}`, pad: "é".repeat(9600) });
    await Split.flush();
  });
  const rows = await rowsWhen(
    "the large batch",
    `SELECT click_target FROM events FINAL WHERE session_id = '${session}' AND event_name = 'click'`,
    (rows) => rows.length === 4,
    20,
  );
  assert.equal(rows.length, 4);
  await ctx.close();
});

test("unload: beacons within 64 KiB, the rest kept and sent by the next page view", T, async () => {
  const { ctx } = await context();
  const page = await open(ctx);
  const session = await sessionOf(page);
  // The impression and three clicks of 25 KB: no batch of five, 75 KB to send at unload.
  await page.evaluate(() => {
    for (let i = 0; i < 3; i++)
      Split.track("click", "exp_sdk_hero", { clickTarget: `#unload-${i}`, pad: "é".repeat(12500) });
  });
  await page.goto(origin + "/next");
  const beacons = await page.evaluate(() => JSON.parse(sessionStorage.getItem("test_beacons") || "[]"));
  const total = beacons.filter((b) => b.ok).reduce((n, b) => n + b.bytes, 0);
  // The hide (visibilitychange) and pagehide both unload: the second finds the budget
  // still taken by the first's beacons, is refused, and keeps its events.
  assert.ok(beacons[0]?.ok, JSON.stringify(beacons));
  assert.ok(total <= 65536, `${total} bytes of beacons`);
  const first = await rowsWhen(
    "what the beacons carried",
    `SELECT click_target FROM events FINAL WHERE session_id = '${session}' AND event_name = 'click'`,
    (rows) => rows.length >= 2,
  );
  assert.equal(first.length, 2, "two fitted: the third waits for the next view");
  // Kept by the page, then queued (and kept, under its own key) by the next, which sends it.
  const kept = await page.evaluate(() =>
    Object.keys(localStorage)
      .filter((k) => k.startsWith("split_kept"))
      .flatMap((k) => JSON.parse(localStorage.getItem(k))),
  );
  assert.equal(kept.length, 1, JSON.stringify(kept));
  await open(ctx, "/landing"); // the next page view sends what was kept
  const rows = await rowsWhen(
    "all three",
    `SELECT click_target FROM events FINAL WHERE session_id = '${session}' AND event_name = 'click'`,
    (rows) => rows.length === 3,
    20,
  );
  assert.deepEqual(rows.map((r) => r.click_target).sort(), ["#unload-0", "#unload-1", "#unload-2"]);
  await ctx.close();
});

test("a 408 and a network error are retried until the events land", T, async () => {
  const { ctx, posts } = await context();
  let answers = 0;
  await ctx.route(FRONT + "/api/v1/analytics", async (route) => {
    if (route.request().method() !== "POST") return route.continue();
    answers++;
    if (answers === 1)
      return route.fulfill({
        status: 408,
        headers: { "content-type": "application/json", "access-control-allow-origin": origin },
        body: '{"error":{"code":"request_timeout","message":"Too slow."}}',
      });
    if (answers === 2) return route.abort("connectionreset");
    return route.continue();
  });
  const page = await open(ctx);
  const session = await sessionOf(page);
  await page.evaluate(async () => {
    Split.track("click", "exp_sdk_hero", { clickTarget: "#retry-408" });
    await Split.flush();
  });
  const rows = await rowsWhen(
    "the retried events",
    `SELECT event_name FROM events FINAL WHERE session_id = '${session}'`,
    (rows) => rows.length === 2,
    20,
  );
  assert.equal(rows.length, 2);
  assert.ok(answers >= 3, `${answers} attempts`);
  const ids = posts.map((p) => p.events.map((e) => e.eventId).join());
  assert.ok(ids.every((x) => x === ids[0]), "the same events each time");
  await ctx.close();
});

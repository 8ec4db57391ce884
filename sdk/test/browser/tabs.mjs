// Many tabs and outages, in real Chromium through the real pipeline, counting events
// tracked and events stored: one visitor when two new tabs open at once and when two
// tabs wait for consent then get it; events that outlive an outage the SDK was told to
// wait an hour out, a tab killed before it could send, and events sent twice (stored once).
import { test } from "node:test";
import assert from "node:assert/strict";
import { EXP, FRONT, PARTS, T, context, eventually, head, heroRoot, open, origin, rowsWhen, site, sleep } from "./kit.mjs";

site((url) =>
  url.pathname === "/pending"
    ? `<!doctype html><html><head>${head({ init: ', consent: "pending"' })}</head><body>${heroRoot}</body></html>`
    : undefined,
);

/** The visitors and events of one campaign (every event of a test carries its own). */
const campaign = (name, count) =>
  rowsWhen(
    `${count} events of ${name}`,
    `SELECT visitor_id, event_name, variant_id, click_target FROM events FINAL WHERE utm_campaign = '${name}'`,
    (rows) => rows.length >= count,
    30,
  );

const click = (page, target) => page.evaluate(([e, t]) => Split.track("click", e, { clickTarget: t }), [EXP, target]);

/** A landing page of campaign `name` that showed the hero and tracked `#kind-0` to `#kind-2`: four events queued. */
async function threeClicks(ctx, name, kind) {
  const page = await open(ctx, `/landing?utm_campaign=${name}`);
  await page.evaluate((e) => Split.variant(e), EXP);
  for (let i = 0; i < 3; i++) await click(page, `#${kind}-${i}`);
  return page;
}

test("two new tabs opened at once are one visitor, each event with the variant its tab showed", T, async () => {
  for (let run = 0; run < 3; run++) {
    const name = `tabs-${Date.now()}-${run}`;
    const { ctx } = await context();
    const tabs = await Promise.all(["a", "b"].map((t) => open(ctx, `/landing?tab=${t}&utm_campaign=${name}`)));
    const shown = await Promise.all(tabs.map((p) => p.evaluate((e) => Split.variant(e), EXP)));
    for (const [i, p] of tabs.entries()) {
      assert.equal(await p.locator("h1").textContent(), PARTS[shown[i]].headline);
      await click(p, `#tab-${i}`);
    }
    await Promise.all(tabs.map((p) => p.evaluate(() => Split.flush())));
    const rows = await campaign(name, 4);
    assert.equal(new Set(rows.map((r) => r.visitor_id)).size, 1, `run ${run}: ${JSON.stringify(rows)}`);
    for (const [i, variant] of shown.entries())
      assert.ok(rows.some((r) => r.click_target === `#tab-${i}` && r.variant_id === variant), JSON.stringify(rows));
    await ctx.close();
  }
});

test("two tabs waiting for consent, then granted in each: one visitor", T, async () => {
  const name = `pending-${Date.now()}`;
  const { ctx } = await context();
  const tabs = [];
  for (const t of ["a", "b"]) tabs.push(await open(ctx, `/pending?tab=${t}&utm_campaign=${name}`));
  for (const [i, p] of tabs.entries()) {
    await p.evaluate((e) => Split.variant(e), EXP);
    await click(p, `#pending-${i}`);
  }
  for (const p of tabs) await p.evaluate(() => Split.setConsent("granted") || Split.flush());
  const rows = await campaign(name, 4);
  assert.equal(new Set(rows.map((r) => r.visitor_id)).size, 1, JSON.stringify(rows));
  await ctx.close();
});

test("an outage the service said to wait an hour out: the events go as soon as the browser is back online", T, async () => {
  const name = `outage-${Date.now()}`;
  const { ctx, posts } = await context();
  let down = true;
  await ctx.route(FRONT + "/api/v1/analytics", (route) =>
    down
      ? route.fulfill({ status: 503, headers: { "Retry-After": "3600" }, body: "{}" })
      : route.continue(),
  );
  const page = await threeClicks(ctx, name, "outage");
  const tried = posts.length;
  await page.evaluate(() => void Split.flush()); // answered 503: the next try in an hour
  await eventually("the first try", async () => posts.length > tried, 10);
  await sleep(500);
  down = false;
  await ctx.setOffline(true);
  await sleep(500);
  await ctx.setOffline(false); // `online`
  const rows = await campaign(name, 4);
  assert.equal(rows.length, 4, JSON.stringify(rows));
  await ctx.close();
});

test("a tab killed before it sent: the next page view sends its events", T, async () => {
  const name = `killed-${Date.now()}`;
  const { ctx, posts } = await context();
  const page = await threeClicks(ctx, name, "killed");
  assert.equal(posts.length, 0, "four events wait for the 5-second timer");
  // The renderer dies: no pagehide, no visibilitychange, no beacon.
  const cdp = await ctx.newCDPSession(page);
  const crashed = new Promise((r) => page.once("crash", r));
  void cdp.send("Page.crash").catch(() => {}); // answers never: the page is gone
  await Promise.race([crashed, sleep(10_000)]);
  await open(ctx, "/landing"); // the session's campaign: its impression counts here too
  const rows = await campaign(name, 5);
  assert.deepEqual(rows.filter((r) => r.event_name === "click").map((r) => r.click_target).sort(), [
    "#killed-0",
    "#killed-1",
    "#killed-2",
  ]);
  assert.deepEqual(rows.map((r) => r.event_name).sort(), ["click", "click", "click", "impression", "impression"]);
  await ctx.close();
});

test("the same events sent twice (two views send one kept queue) are stored once", T, async () => {
  const name = `twice-${Date.now()}`;
  const { ctx, posts } = await context();
  const page = await threeClicks(ctx, name, "twice");
  // Another view's copy of this queue, as a tab that adopted it and then died would leave.
  await page.evaluate(() => {
    for (const k of Object.keys(localStorage))
      if (k.startsWith("split_kept:")) localStorage.setItem("split_kept:copy", localStorage.getItem(k));
    return Split.flush();
  });
  await open(ctx, "/landing").then((p) => p.evaluate(() => Split.flush()));
  const sent = posts.flatMap((p) => p.events).filter((e) => e.utm_campaign === name);
  const ids = new Set(sent.map((e) => e.eventId));
  assert.ok(sent.length >= 2 * 4, `${sent.length} sent`);
  const rows = await rowsWhen(
    "the events, once each",
    `SELECT event_id, count() AS n FROM events FINAL WHERE utm_campaign = '${name}' GROUP BY event_id`,
    (r) => r.length >= ids.size,
    30,
  );
  assert.equal(rows.length, ids.size, JSON.stringify(rows));
  assert.ok(rows.every((r) => Number(r.n) === 1), JSON.stringify(rows));
  await ctx.close();
});

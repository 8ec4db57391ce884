// Consent and robustness in real Chromium through the real pipeline: the consent-manager flow over 6
// views of one browser (one visitor, one variant, every view's events in ClickHouse), and
// a field that cannot be serialized (refused; the events around it arrive; nothing reaches
// the page).
import { test } from "node:test";
import assert from "node:assert/strict";
import { EXP, PARTS, T, context, head, heroRoot, open, rowsWhen, site, sleep } from "./kit.mjs";

site((url) => {
  if (url.pathname.startsWith("/cmp"))
    return `<!doctype html><html><head>${head({ init: ', consent: "pending"' })}</head><body>${heroRoot}</body></html>`;
});

test("a consent manager over 6 views: one visitor, one variant, every view counted", T, async () => {
  const { ctx } = await context();
  const headlines = [];
  const visitors = new Set();
  for (let view = 1; view <= 6; view++) {
    const page = await open(ctx, `/cmp/${view}`);
    if (view === 1) assert.deepEqual(await page.evaluate(() => Object.keys(localStorage)), [], "nothing stored while pending");
    // The banner answers about 300 ms later on views 1, 3 and 5; on 2, 4 and 6 it does not
    // call at all (the remembered decision serves).
    if (view % 2) {
      await sleep(300);
      await page.evaluate(() => Split.setConsent("granted"));
    }
    headlines.push(await page.locator("h1").textContent());
    await page.evaluate((v) => Split.track("click", "exp_sdk_hero", { clickTarget: "#cmp-" + v }), view);
    await page.evaluate(() => Split.flush());
    visitors.add(await page.evaluate(() => localStorage.getItem("split_vid")));
    await page.close();
  }
  assert.equal(visitors.size, 1, [...visitors].join());
  const [visitor] = visitors;
  assert.equal(new Set(headlines).size, 1, headlines.join(" | "));
  const rows = await rowsWhen(
    "6 impressions and 6 clicks",
    `SELECT event_name, variant_id, click_target FROM events FINAL WHERE visitor_id = '${visitor}' ORDER BY event_time`,
    (r) => r.length >= 12,
  );
  assert.equal(rows.length, 12, JSON.stringify(rows));
  assert.equal(rows.filter((r) => r.event_name === "impression").length, 6);
  assert.deepEqual(
    rows.filter((r) => r.event_name === "click").map((r) => r.click_target).sort(),
    ["#cmp-1", "#cmp-2", "#cmp-3", "#cmp-4", "#cmp-5", "#cmp-6"],
  );
  const variants = new Set(rows.map((r) => r.variant_id));
  assert.equal(variants.size, 1, [...variants].join());
  assert.equal(headlines[0], PARTS[[...variants][0]].headline);
  // No click of these views went under another visitor.
  const strays = await rowsWhen(
    "the clicks by visitor",
    `SELECT visitor_id FROM events FINAL WHERE click_target LIKE '#cmp-%'`,
    (r) => r.length >= 6,
  );
  assert.deepEqual([...new Set(strays.map((r) => r.visitor_id))], [visitor]);
  await ctx.close();
});

test("a circular or BigInt field is refused at track; the impression and 10 later clicks arrive", T, async () => {
  const { ctx } = await context(() => {
    window.escaped = [];
    addEventListener("unhandledrejection", (e) => escaped.push(String(e.reason)));
    addEventListener("error", (e) => escaped.push(String(e.message)));
  });
  const page = await open(ctx, "/landing");
  const visitor = await page.evaluate((exp) => {
    Split.variant(exp);
    const detail = { a: 1 };
    detail.self = detail;
    Split.track("add_to_cart", exp, { detail });
    Split.track("add_to_cart", exp, { big: 10n });
    for (let i = 0; i < 10; i++) Split.track("click", exp, { clickTarget: "#circular-" + i });
    return localStorage.getItem("split_vid");
  }, EXP);
  await page.evaluate(() => Split.flush());
  await sleep(500);
  assert.deepEqual(await page.evaluate(() => window.escaped), [], "nothing reached the page");
  await page.close(); // the unload beacon, with nothing left to throw on
  const rows = await rowsWhen(
    "the impression and the 10 clicks",
    `SELECT event_name FROM events FINAL WHERE visitor_id = '${visitor}'`,
    (r) => r.length >= 11,
  );
  const names = rows.map((r) => r.event_name);
  assert.equal(names.filter((n) => n === "click").length, 10);
  assert.equal(names.filter((n) => n === "impression").length, 1);
  assert.ok(!names.includes("add_to_cart"), names.join());
  await ctx.close();
});

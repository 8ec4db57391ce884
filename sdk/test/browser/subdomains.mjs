// Two subdomains of one site in real Chromium through the real pipeline: Chromium's host
// resolver maps www.split.test and shop.split.test to 127.0.0.1, and with
// `cookieDomain: "split.test"` the visitor of www is the visitor of shop (their own
// localStorage each): one visitor id, one variant in ClickHouse.
import { test } from "node:test";
import assert from "node:assert/strict";
import { EXP, PARTS, T, context, head, heroRoot, origin, rowsWhen, site } from "./kit.mjs";

site(
  (url) =>
    url.pathname === "/shared"
      ? `<!doctype html><html><head>${head({ init: ', cookieDomain: "split.test"' })}</head><body>${heroRoot}</body></html>`
      : undefined,
  { args: ["--host-resolver-rules=MAP www.split.test 127.0.0.1, MAP shop.split.test 127.0.0.1"] },
);

test("www. and shop. with cookieDomain: one visitor, one variant", T, async () => {
  const { ctx } = await context();
  const port = new URL(origin).port;
  const seen = [];
  for (const host of ["www.split.test", "shop.split.test", "www.split.test"]) {
    const page = await ctx.newPage();
    await page.goto(`http://${host}:${port}/shared`);
    await page.evaluate(() => window.splitReady);
    const [visitor, variant, cookie] = await page.evaluate(
      (e) => [localStorage.getItem("split_vid"), Split.variant(e), document.cookie],
      EXP,
    );
    assert.match(cookie, /split_vid=/, host);
    assert.equal(await page.locator("h1").textContent(), PARTS[variant].headline);
    await page.evaluate((h) => Split.track("click", "exp_sdk_hero", { clickTarget: "#" + h }), host);
    await page.evaluate(() => Split.flush());
    seen.push([host, visitor, variant]);
    await page.close();
  }
  const visitors = new Set(seen.map(([, v]) => v));
  assert.equal(visitors.size, 1, JSON.stringify(seen));
  const [visitor] = visitors;
  const rows = await rowsWhen(
    "three impressions and three clicks",
    `SELECT event_name, visitor_id, variant_id, click_target FROM events FINAL WHERE click_target LIKE '#%split.test'
     OR (visitor_id = '${visitor}' AND event_name = 'impression')`,
    (r) => r.length >= 6,
  );
  assert.equal(rows.length, 6, JSON.stringify(rows));
  assert.deepEqual([...new Set(rows.map((r) => r.visitor_id))], [visitor]);
  assert.equal(new Set(rows.map((r) => r.variant_id)).size, 1);
  assert.deepEqual(
    rows.filter((r) => r.event_name === "click").map((r) => r.click_target).sort(),
    ["#shop.split.test", "#www.split.test", "#www.split.test"],
  );
  await ctx.close();
});

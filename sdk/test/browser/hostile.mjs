// A hostile page in real Chromium through the real pipeline: a frozen JSON, a read-only
// history.pushState, no navigator.sendBeacon, and the auto-capture with an invalid
// data-conversion-url. Init and the auto-capture work, nothing reaches the page, and
// every event arrives (what the missing beacon could not send goes from the next page).
import { test } from "node:test";
import assert from "node:assert/strict";
import { EXP, FRONT, PARTS, T, context, head, heroRoot, origin, rowsWhen, site, sleep } from "./kit.mjs";

const autotrack = `<script src="${FRONT}/sdk/v1/split-autotrack.min.js" data-conversion-url="(unclosed"></script>`;
site((url) =>
  url.pathname.startsWith("/hostile")
    ? `<!doctype html><html><head>${head({ extra: autotrack })}</head><body>${heroRoot.replace(
        "</div>",
        '<a data-split-goal="signup" href="#">Sign up</a></div>',
      )}</body></html>`
    : undefined,
);

// Before any script of the page: what a hostile page (or its other libraries) does.
const hostile = () => {
  window.escaped = [];
  addEventListener("unhandledrejection", (e) => escaped.push("rejection: " + e.reason));
  addEventListener("error", (e) => escaped.push("error: " + e.message));
  Object.freeze(JSON);
  for (const target of [History.prototype, history])
    Object.defineProperty(target, "pushState", { value: History.prototype.pushState, writable: false, configurable: false });
  delete navigator.sendBeacon; // the test kit's recording wrapper
  delete Navigator.prototype.sendBeacon;
};

test("frozen JSON, read-only pushState, no sendBeacon, an invalid conversion rule: init, auto-capture and every event work", T, async () => {
  const { ctx } = await context(hostile);
  const page = await ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => console.log("  [page]", m.text().slice(0, 300)));
  await page.goto(origin + "/hostile/one");
  await page.evaluate(() => window.splitReady);
  assert.equal(await page.evaluate(() => typeof navigator.sendBeacon), "undefined", "no sendBeacon");
  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  assert.ok(PARTS[variant], variant);
  assert.equal(await page.locator("h1").textContent(), PARTS[variant].headline);
  const visitor = await page.evaluate(() => localStorage.getItem("split_vid"));
  await page.click("[data-split-goal]");
  // The page's own router: pushState works, the SDK follows by popstate and refresh().
  await page.evaluate(() => {
    history.pushState({}, "", "/hostile/two");
    Split.refresh();
  });
  await sleep(100);
  // The next page: its unload found no sendBeacon, kept the events (the auto-capture's
  // measures too) and this page sends them.
  await page.goto(origin + "/hostile/three");
  await page.evaluate(() => window.splitReady);
  await page.evaluate(() => Split.flush());
  assert.deepEqual(await page.evaluate(() => window.escaped), [], "nothing reached the page");
  assert.deepEqual(errors, []);
  const rows = await rowsWhen(
    "the three impressions, the click and the first page's measures",
    `SELECT event_name, variant_id, pathname FROM events FINAL WHERE visitor_id = '${visitor}' ORDER BY event_time`,
    (r) => r.length >= 6,
  );
  const count = (name) => rows.filter((r) => r.event_name === name).length;
  assert.equal(count("impression"), 3, JSON.stringify(rows));
  assert.equal(count("click"), 1);
  assert.ok(count("scroll_depth") >= 1 && count("dwell_time") >= 1, JSON.stringify(rows));
  assert.deepEqual([...new Set(rows.map((r) => r.variant_id))], [variant]);
  await ctx.close();
});

// Returning visitors in real Chromium through the real pipeline, with a 1.5 s answer: past
// the answer's 30 s lifetime, the stored answer is applied at once (no frame shows the
// original text) and each view's impression records it; a first visit whose answer comes
// after the failsafe keeps its original text, and the next single-page-app view shows the
// variant, with its impression.
import { test } from "node:test";
import assert from "node:assert/strict";
import { EXP, PARTS, T, context, eventually, head, heroRoot, open, origin, rowsWhen, sampleFrames, site, sleep, slowAnswers } from "./kit.mjs";

// A tiny router: pushState, then the view's render (the same hero, rendered anew).
const router = `<script>
window.go = (path) => {
  history.pushState({}, "", path);
  document.getElementById("view").innerHTML = ${JSON.stringify(heroRoot)};
};
</script>`;

site((url) =>
  url.pathname.startsWith("/app")
    ? `<!doctype html><html><head>${head()}${router}</head><body><main id="view">${heroRoot}</main></body></html>`
    : undefined,
);

const impressions = (visitor, n) =>
  rowsWhen(
    `${n} impressions`,
    `SELECT variant_id, pathname FROM events FINAL
     WHERE visitor_id = '${visitor}' AND event_name = 'impression' ORDER BY event_time`,
    (r) => r.length >= n,
  );

test("past the answer's lifetime, a 1.5 s answer: the stored variant in every frame, each view's impression", T, async () => {
  let { ctx } = await context();
  let page = await open(ctx, "/app/one");
  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  const visitor = await page.evaluate(() => localStorage.getItem("split_vid"));
  // An hour later: the stored answer (lifetime 30 s) an hour old; a new context, so no
  // HTTP cache either.
  const lifetime = await page.evaluate(() => {
    const key = Object.keys(localStorage).find((k) => k.startsWith("split_cache:"));
    const cached = JSON.parse(localStorage.getItem(key));
    cached.t -= 3600_000;
    localStorage.setItem(key, JSON.stringify(cached));
    return cached.a;
  });
  assert.equal(lifetime, 30, "the config-api's answer lives 30 s");
  // The first view's impression sent and stored before the context closes: a beacon sent
  // while Playwright tears the context down is sometimes dropped with it.
  await page.evaluate(() => Split.flush());
  await impressions(visitor, 1);
  const state = await ctx.storageState();
  await ctx.close();
  let gets;
  ({ ctx, gets } = await context(sampleFrames(2500), state));
  await slowAnswers(ctx, 1500);
  page = await ctx.newPage();
  await page.goto(origin + "/app/one");
  await page.evaluate(() => window.splitReady);
  assert.equal(gets.length, 1, "a fresh answer was fetched");
  await sleep(1200); // the rest of the sampled frames
  const frames = await page.evaluate(() => frames_);
  assert.ok(frames.length > 20, `${frames.length} frames`);
  const seen = new Set(frames.filter(([, v]) => v === "visible").map(([t]) => t));
  assert.deepEqual([...seen], [PARTS[variant].headline], JSON.stringify(frames.slice(0, 5)));
  // A single-page-app view: their variant still.
  await page.evaluate(() => go("/app/two"));
  await sleep(100);
  assert.equal(await page.locator("h1").textContent(), PARTS[variant].headline);
  await page.evaluate(() => Split.flush());
  const rows = await impressions(visitor, 3);
  assert.deepEqual(
    rows.map((r) => [r.variant_id, r.pathname]),
    [[variant, "/app/one"], [variant, "/app/one"], [variant, "/app/two"]],
  );
  await ctx.close();
});

test("a first visit's answer after the failsafe: the original on this view, the variant from the next one", T, async () => {
  const { ctx } = await context();
  await slowAnswers(ctx, 1500);
  const page = await ctx.newPage();
  page.on("console", (m) => console.log("  [page]", m.text().slice(0, 300)));
  await page.goto(origin + "/app/one");
  await page.evaluate(() => window.splitReady);
  assert.equal(await page.locator("h1").textContent(), "Original headline", "no late swap");
  assert.equal(await page.evaluate((e) => Split.variant(e), EXP), null);
  await page.evaluate(() => go("/app/two"));
  await eventually(
    "the late answer on the next view",
    () => page.evaluate(() => document.querySelector("h1").textContent !== "Original headline"),
    5,
  );
  const variant = await page.evaluate((e) => Split.variant(e), EXP);
  assert.equal(await page.locator("h1").textContent(), PARTS[variant].headline);
  const visitor = await page.evaluate(() => localStorage.getItem("split_vid"));
  await page.evaluate(() => Split.flush());
  const rows = await impressions(visitor, 1);
  await sleep(1000);
  assert.deepEqual((await impressions(visitor, 1)).map((r) => [r.variant_id, r.pathname]), [[variant, "/app/two"]]);
  assert.equal(rows.length, 1);
  await ctx.close();
});

// A strict Content-Security-Policy in real Chromium through the real pipeline: under
// `style-src 'self'` (no inline styles allowed), the parts still wait for their text,
// sampled at every animation frame, and nothing the SDK does is refused.
import { test } from "node:test";
import assert from "node:assert/strict";
import { EXP, PARTS, T, context, head, heroRoot, origin, rowsWhen, sampleFrames, site, sleep, slowAnswers } from "./kit.mjs";

site((url) =>
  url.pathname === "/csp"
    ? {
        headers: { "content-security-policy": "style-src 'self'" },
        body: `<!doctype html><html><head>${head()}</head><body>${heroRoot}</body></html>`,
      }
    : undefined,
);

test("under style-src 'self', no frame shows the original text, and nothing is refused", T, async () => {
  const { ctx } = await context(
    sampleFrames(1500) +
      `window.refused = [];
document.addEventListener("securitypolicyviolation", (e) => refused.push(e.violatedDirective + " " + e.blockedURI));`,
  );
  // The answer takes 400 ms: some 24 frames before it on the first view.
  await slowAnswers(ctx, 400);
  let variant;
  let visitor;
  for (const view of ["first", "repeat"]) {
    const page = await ctx.newPage();
    await page.goto(origin + "/csp");
    await page.evaluate(() => window.splitReady);
    await sleep(1200);
    variant ??= await page.evaluate((e) => Split.variant(e), EXP);
    visitor ??= await page.evaluate(() => localStorage.getItem("split_vid"));
    const frames = await page.evaluate(() => frames_);
    assert.ok(frames.length > 20, `${view}: ${frames.length} frames`);
    const seen = new Set(frames.filter(([, v]) => v === "visible").map(([t]) => t));
    assert.deepEqual([...seen], [PARTS[variant].headline], `${view}: ${JSON.stringify(frames.slice(0, 8))}`);
    if (view === "first") assert.ok(frames.some(([, v]) => v === "hidden"), "the parts waited for the answer");
    assert.deepEqual(await page.evaluate(() => refused), [], `${view}: refused by the CSP`);
    await page.evaluate(() => Split.flush());
    await page.close();
  }
  const rows = await rowsWhen(
    "both views' impressions",
    `SELECT variant_id FROM events FINAL WHERE visitor_id = '${visitor}' AND event_name = 'impression'`,
    (r) => r.length >= 2,
  );
  assert.deepEqual(rows.map((r) => r.variant_id), [variant, variant]);
  await ctx.close();
});

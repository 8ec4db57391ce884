// Fresh answers and the visitor and phase on events, in real
// Chromium through the real pipeline: the test changes its own experiment,
// exp_sdk_phase, in the snapshot file that the config-api reloads, and a returning
// visitor (the same storage, a new browser context: no HTTP cache) whose cached answer has
// outlived its lifetime and the day it may be applied stale sees each change. A
// conversion counts in the phase of the visitor's assignment.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { FRONT, PK, SNAPSHOT, T, context, eventually, head, open, rowsWhen, site } from "./kit.mjs";

const PHASE = "exp_sdk_phase";

site((url) => {
  if (url.pathname === "/phase")
    return `<!doctype html><html><head>${head({ ids: [PHASE] })}</head><body>
<div data-split-experiment="${PHASE}"><h1 data-split-part="title">Phase original</h1></div></body></html>`;
  // A checkout page: the experiment's conversion, without the experiment on it.
  if (url.pathname === "/phase-checkout")
    return `<!doctype html><html><head>${head({ ids: [PHASE] })}</head><body><p>Thanks</p></body></html>`;
});

/** Changes exp_sdk_phase in the snapshot and waits until the config-api serves it. */
async function change(edit) {
  const doc = JSON.parse(readFileSync(SNAPSHOT, "utf8"));
  edit(doc.experiments.find((e) => e.id === PHASE));
  doc.version = `sdk-${Date.now()}`;
  writeFileSync(SNAPSHOT + ".next", JSON.stringify(doc));
  renameSync(SNAPSHOT + ".next", SNAPSHOT);
  const want = JSON.stringify(doc.experiments.find((e) => e.id === PHASE && e.status === "live")?.phase ?? null);
  await eventually("the config-api's new answer", async () => {
    const r = await fetch(FRONT + "/api/v1/experiments", { headers: { "X-public-key": PK, "X-experiment-ids": PHASE } });
    const served = (await r.json()).experiments[0];
    return JSON.stringify(served?.phase ?? null) === want;
  }, 20);
}

/** The same visitor later: their storage, the cached answer past its lifetime and a day more. */
async function later(ctx) {
  const state = await ctx.storageState();
  for (const o of state.origins)
    for (const item of o.localStorage)
      if (item.name.startsWith("split_cache:")) {
        const cached = JSON.parse(item.value);
        cached.t -= (cached.a + 86400 + 1) * 1000;
        item.value = JSON.stringify(cached);
      }
  await ctx.close();
  return context(undefined, state);
}

test("a new phase re-randomizes, weight 0 reassigns, a stopped experiment shows the original", T, async () => {
  let { ctx } = await context();
  let page = await open(ctx, "/phase");
  const [first, visitor] = await page.evaluate((e) => [Split.variant(e), localStorage.getItem("split_vid")], PHASE);
  assert.ok(first, "assigned in phase 1");
  const other = first === "var_sdk_p_a" ? "var_sdk_p_b" : "var_sdk_p_a";
  await page.evaluate(() => Split.flush());

  // Phase 2, the visitor's variant at weight 0: reassigned to the other one.
  await change((e) => {
    e.phase = 2;
    for (const v of e.variants) v.weight = v.id === first ? 0 : 100;
  });
  ({ ctx } = await later(ctx));
  // Converting before they see the experiment in phase 2: the conversion is phase 1's.
  page = await open(ctx, "/phase-checkout");
  await page.evaluate(async (e) => {
    Split.convert(e, { clickTarget: "#checkout" });
    await Split.flush();
  }, PHASE);
  await page.close();
  page = await open(ctx, "/phase");
  assert.equal(await page.evaluate((e) => Split.variant(e), PHASE), other);
  assert.equal(await page.locator("h1").textContent(), other === "var_sdk_p_a" ? "Phase A" : "Phase B");
  const listed = await page.evaluate(() => Split.assignments());
  assert.deepEqual(listed.map((a) => [a.experimentId, a.variantId, a.phase]), [[PHASE, other, 2]]);
  await page.evaluate(() => Split.flush());

  // Stopped: the original, no impression; events about it carry no variant.
  await change((e) => (e.status = "ended"));
  let posts;
  ({ ctx, posts } = await later(ctx));
  page = await open(ctx, "/phase");
  assert.equal(await page.locator("h1").textContent(), "Phase original");
  assert.equal(await page.evaluate((e) => Split.variant(e), PHASE), null);
  await page.evaluate(async (e) => {
    Split.track("click", e, { clickTarget: "#stopped" });
    await Split.flush();
  }, PHASE);

  const rows = await rowsWhen(
    "the visitor's four events",
    `SELECT event_name, variant_id, phase, visitor_id FROM events FINAL
     WHERE experiment_id = '${PHASE}' AND visitor_id = '${visitor}' ORDER BY event_time`,
    (r) => r.length >= 4,
  );
  assert.deepEqual(
    rows.map((r) => [r.event_name, r.variant_id, r.phase]),
    [
      ["impression", first, 1],
      // After phase 2 began, by a visitor assigned in phase 1 and not yet shown phase 2.
      ["conversion", first, 1],
      ["impression", other, 2],
      // Sent without variant or phase; the ingest stores the experiment's phase now.
      ["click", "", 2],
    ],
  );
  const [click] = posts.flatMap((p) => p.events);
  assert.deepEqual([click.eventName, click.variantId, click.phase, click.visitorId], ["click", undefined, undefined, visitor]);
  await ctx.close();
});

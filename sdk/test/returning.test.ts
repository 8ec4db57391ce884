// Returning visitors and phases, on the built script in a fake page: the stored answer
// applies at once past its lifetime (up to maxStale, a day by default) while a fresh one
// is fetched; a changed or late answer applies from the next view (no late swap); an event
// counts in the phase of the visitor's assignment, even once a new phase began.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Browser, INIT, page, settle } from "./page";

const only = (variant: string, phase = 1) => [{ id: "exp_a", phase, variants: [{ id: variant, weight: 100 }] }];

/** Makes the stored answer `seconds` older. */
function age(b: Browser, seconds: number): void {
  for (const key of Object.keys(b.local).filter((k) => k.startsWith("split_cache:"))) {
    const cached = JSON.parse(b.local.getItem(key)!);
    cached.t -= seconds * 1000;
    b.local.setItem(key, JSON.stringify(cached));
  }
}

test("past its lifetime, the stored answer applies at once; a changed one from the next view", async () => {
  const b = new Browser();
  const first = page(b, { experiments: only("var_a"), maxAge: 30 });
  await first.Split.init(INIT);
  assert.equal(first.Split.variant("exp_a"), "var_a");
  await first.Split.flush();
  age(b, 3600); // an hour later: 59.5 minutes past the answer's 30 s lifetime

  const second = page(b, { experiments: only("var_b"), maxAge: 30, answerDelay: 1500 });
  const done = second.Split.init(INIT);
  assert.equal(second.Split.variant("exp_a"), "var_a", "the stored answer, before the fresh one");
  await done;
  assert.equal(second.Split.variant("exp_a"), "var_a", "no swap on this view");
  second.Split.refresh(); // a single-page-app view: the fresh answer
  assert.equal(second.Split.variant("exp_a"), "var_b");
  await second.Split.flush();
  assert.deepEqual(
    second.events().filter((e) => e.eventName === "impression").map((e) => e.variantId),
    ["var_a", "var_b"],
    "each view's impression records what it showed",
  );

  const third = page(b, { experiments: only("var_b"), maxAge: 30, answerDelay: 1500 });
  void third.Split.init(INIT);
  assert.equal(third.Split.variant("exp_a"), "var_b", "the next page: the fresh answer, stored");
});

test("the stored answer applies up to maxStale past its lifetime (a day by default), not later", async () => {
  for (const [maxStale, applied] of [[undefined, false], [7 * 86400, true]] as const) {
    const b = new Browser();
    await page(b, { experiments: only("var_a"), maxAge: 30 }).Split.init(INIT);
    age(b, 30 + 86400 + 60);
    const p = page(b, { experiments: only("var_a"), maxAge: 30, answerDelay: 300 });
    const done = p.Split.init({ ...INIT, maxStale });
    assert.equal(p.Split.variant("exp_a"), applied ? "var_a" : null, `maxStale ${maxStale}`);
    await done;
  }
});

test("an answer after the failsafe: this view keeps its original, the next single-page view uses it", async () => {
  const p = page(new Browser(), { experiments: only("var_a"), answerDelay: 1000 });
  const done = p.Split.init(INIT);
  await settle(900);
  assert.equal(p.Split.variant("exp_a"), null, "the failsafe passed: originals");
  await done;
  assert.equal(p.Split.variant("exp_a"), null, "no late swap");
  p.Split.refresh();
  assert.equal(p.Split.variant("exp_a"), "var_a", "the late answer, on the next view");
  await p.Split.flush();
  assert.deepEqual(p.events().map((e) => [e.eventName, e.variantId]), [["impression", "var_a"]]);
});

test("consent denied: a late answer never applies on this page", async () => {
  const p = page(new Browser(), { experiments: only("var_a"), answerDelay: 1000 });
  const done = p.Split.init(INIT);
  await settle(900);
  p.Split.setConsent("denied");
  await done;
  p.Split.setConsent("granted");
  p.Split.refresh();
  assert.equal(p.Split.variant("exp_a"), null);
});

test("an event counts in the phase of the visitor's assignment, even once a new phase began", async () => {
  const b = new Browser();
  const phase1 = [{ id: "exp_a", phase: 1, variants: [{ id: "var_a", weight: 50 }, { id: "var_b", weight: 50 }] }];
  const one = page(b, { experiments: phase1 });
  await one.Split.init(INIT);
  const v1 = one.Split.variant("exp_a");
  await one.Split.flush();

  // Phase 2 began; the visitor converts on a page without the experiment, then sees it.
  const phase2 = [{ ...phase1[0], phase: 2 }];
  const two = page(b, { experiments: phase2 });
  await two.Split.init(INIT);
  const listed: { variantId: string; phase: number }[] = JSON.parse(JSON.stringify(two.Split.assignments()));
  assert.deepEqual(listed.map((a) => [a.variantId, a.phase]), [[v1, 1]], "none made in the new phase");
  two.Split.convert("exp_a");
  const v2 = two.Split.variant("exp_a");
  two.Split.convert("exp_a");
  await two.Split.flush();
  assert.deepEqual(
    two.events().map((e) => [e.eventName, e.variantId, e.phase]),
    [
      ["conversion", v1, 1],
      ["impression", v2, 2],
      ["conversion", v2, 2],
    ],
  );
});

import { test } from "node:test";
import assert from "node:assert/strict";
import { assign, bucket, murmur3, pick, type Seen } from "../src/assign";
import type { Experiment } from "../src/index";

test("murmur3 matches the reference MurmurHash3_x86_32", () => {
  assert.equal(murmur3(""), 0);
  assert.equal(murmur3("", 1), 0x514e28b7);
  assert.equal(murmur3("hello"), 0x248bfa47);
  assert.equal(murmur3("The quick brown fox jumps over the lazy dog"), 0x2e4ff723);
});

// The published vectors (docs/sdk.md#assignment): any implementation must agree.
test("assignment vectors", () => {
  const exp: Experiment = {
    id: "exp_hero",
    variants: [
      { id: "var_a", weight: 50 },
      { id: "var_b", weight: 50 },
    ],
  };
  // Computed with PyPI's mmh3 (the C reference implementation), not with this code.
  const vectors: [string, number, string][] = [
    ["visitor-1", 0.5833567690569907, "var_b"],
    ["visitor-2", 0.18177847564220428, "var_a"],
    ["visitor-3", 0.04608279839158058, "var_a"],
    ["3f2c1b9e-0d4a-4c5e-9f7a-2b8c6d1e0f3a", 0.533172114752233, "var_b"],
  ];
  for (const [visitor, point, variant] of vectors) {
    assert.equal(bucket(exp.id, visitor), point, visitor);
    assert.equal(pick(exp, visitor)?.id, variant, visitor);
  }
  const price: Experiment = {
    id: "exp_price",
    variants: [
      { id: "var_10", weight: 10 },
      { id: "var_30", weight: 30 },
      { id: "var_60", weight: 60 },
    ],
  };
  assert.deepEqual(
    ["visitor-1", "visitor-2", "visitor-3"].map((v) => pick(price, v)?.id),
    ["var_30", "var_30", "var_60"],
  );
});

/**
 * `n` visitor ids shaped like the SDK's (UUID v4), from a fixed-seed PRNG (mulberry32):
 * the same ids every run, so the check below passes or fails the same way every time.
 */
function visitorIds(n: number, seed: number): string[] {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
  const hex = (x: number) => x.toString(16).padStart(8, "0");
  return Array.from({ length: n }, () => {
    const [a, b, c, d] = [next(), next(), next(), next()];
    const variant = (8 + (c >>> 30)).toString(16); // 8, 9, a or b
    return `${hex(a)}-${hex(b).slice(0, 4)}-4${hex(b).slice(5)}-${variant}${hex(c).slice(1, 4)}-${hex(c).slice(4)}${hex(d)}`;
  });
}

function chiSquare(weights: number[], n: number): number {
  const exp: Experiment = {
    id: "exp_chi",
    variants: weights.map((w, i) => ({ id: `var_${i}`, weight: w })),
  };
  const counts = weights.map(() => 0);
  for (const visitor of visitorIds(n, 20261122)) {
    const v = pick(exp, visitor);
    counts[Number(v!.id.slice(4))]++;
  }
  const total = weights.reduce((a, b) => a + b, 0);
  return counts.reduce((sum, c, i) => {
    const expected = (n * weights[i]) / total;
    return sum + (c - expected) ** 2 / expected;
  }, 0);
}

test("assignment follows the weights (chi-square over 20,000 seeded visitor ids)", () => {
  const ids = visitorIds(20000, 20261122);
  assert.equal(new Set(ids).size, ids.length, "distinct ids");
  assert.match(ids[0], /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  // Critical values at p = 0.001: 10.83 (1 degree of freedom), 13.82 (2). The ids are
  // fixed, so the statistics are too: a pass here is no luck of the draw.
  const even = chiSquare([50, 50], 20000);
  assert.ok(even < 10.83, `50/50: chi-square ${even}`);
  const uneven = chiSquare([10, 30, 60], 20000);
  assert.ok(uneven < 13.82, `10/30/60: chi-square ${uneven}`);
});

test("a visitor keeps the variant they saw when weights change, until it disappears", () => {
  const before: Experiment = {
    id: "exp_sticky",
    variants: [
      { id: "var_a", weight: 50 },
      { id: "var_b", weight: 50 },
    ],
  };
  for (let i = 0; i < 200; i++) {
    const visitor = `v${i}`;
    const seen: Seen = {};
    const first = assign(before, visitor, seen)!.id;
    const after: Experiment = {
      id: before.id,
      variants: [
        { id: "var_a", weight: first === "var_a" ? 1 : 99 },
        { id: "var_b", weight: first === "var_b" ? 1 : 99 },
      ],
    };
    assert.equal(assign(after, visitor, seen)!.id, first);
    const gone: Experiment = { id: before.id, variants: after.variants.filter((v) => v.id !== first) };
    assert.notEqual(assign(gone, visitor, seen)!.id, first);
    assert.notEqual(seen[before.id][0], first);
  }
});

test("no variant with weight assigns nothing", () => {
  const seen = {};
  assert.equal(assign({ id: "exp_z", variants: [{ id: "var_a", weight: 0 }] }, "v", seen), null);
  assert.deepEqual(seen, {});
});

// Phase >= 2 hashes experimentId + ":" + phase + ":" + visitorId (docs/sdk.md#assignment).
test("assignment vectors in a later phase", () => {
  const vectors: [number, string, number, string][] = [
    [2, "visitor-1", 0.3915069664362818, "var_a"],
    [2, "visitor-2", 0.2751883545424789, "var_a"],
    [2, "visitor-3", 0.848768153693527, "var_b"],
    [3, "visitor-1", 0.6033890270628035, "var_b"],
  ];
  for (const [phase, visitor, point, variant] of vectors) {
    const exp: Experiment = { id: "exp_hero", phase, variants: [{ id: "var_a", weight: 50 }, { id: "var_b", weight: 50 }] };
    assert.equal(bucket(exp.id, visitor, phase), point, visitor);
    assert.equal(pick(exp, visitor)?.id, variant, visitor);
  }
  assert.equal(bucket("exp_hero", "visitor-1", 1), bucket("exp_hero", "visitor-1"), "phase 1 keeps v1's hash");
});

test("sticky within a phase; a new phase re-randomizes; weight 0 reassigns", () => {
  const exp = (phase: number | undefined, a: number, b = 50): Experiment => ({
    id: "exp_hero",
    phase,
    variants: [{ id: "var_a", weight: a }, { id: "var_b", weight: b }],
  });
  const seen: Seen = { exp_hero: "var_b" }; // stored by SDK v1: phase 1
  assert.equal(assign(exp(undefined, 50), "visitor-2", seen)?.id, "var_b", "kept: phase 1");
  assert.deepEqual(seen.exp_hero, ["var_b", 1], "stored with its phase");
  assert.equal(assign(exp(1, 90, 10), "visitor-2", seen)?.id, "var_b", "weights moved: kept");
  assert.equal(assign(exp(2, 50), "visitor-2", seen)?.id, "var_a", "phase 2: re-randomized");
  assert.deepEqual(seen.exp_hero, ["var_a", 2]);
  assert.equal(assign(exp(2, 0), "visitor-2", seen)?.id, "var_b", "weight 0: reassigned");
  assert.deepEqual(seen.exp_hero, ["var_b", 2]);
});

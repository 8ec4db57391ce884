// Variant assignment: deterministic per visitor and experiment, weighted, and sticky.
//
// bucket = murmur3_32(utf8(experimentId + ":" + visitorId), seed 0) / 2^32, in [0, 1), in
// phase 1; murmur3_32(utf8(experimentId + ":" + phase + ":" + visitorId)) / 2^32 in a phase
// >= 2, so that a new phase re-randomizes every visitor. The variants with a positive
// weight are laid end to end in the order the service lists them, each as wide as its
// weight over the sum of the weights; the visitor gets the one their bucket falls in.

import type { Experiment, Variant } from "./index";

/** A stored assignment: the variant id and the phase it was made in. */
export type Seen = Record<string, [string, number] | string>;

/** A stored assignment as `[variantId, phase]` (a bare variant id is phase 1's), if any. */
export function prior(seen: Seen, experimentId: string): [string, number] | undefined {
  const p = seen[experimentId];
  // A string: an id stored by version 0 (phase 1), unless a page's toJSON wrote the pair.
  return Array.isArray(p) ? p : typeof p === "string" && p[0] !== "[" ? [p, 1] : undefined;
}

/** The experiment's phase, 1 unless the service gives a whole number >= 2. */
export function phaseOf(experiment: Experiment): number {
  const p = experiment.phase;
  return (p as number) >= 2 ? (p as number) : 1;
}

/** MurmurHash3 x86 32-bit of the UTF-8 bytes of `text`. */
export function murmur3(text: string, seed = 0): number {
  const bytes = new TextEncoder().encode(text);
  const n = bytes.length;
  const mix = (k: number) => ((k = Math.imul(k, 0xcc9e2d51)), Math.imul((k << 15) | (k >>> 17), 0x1b873593));
  let h = seed;
  let k = 0;
  for (let i = 0; i < n; i++) {
    k |= bytes[i] << ((i & 3) * 8);
    if ((i & 3) === 3) {
      h ^= mix(k);
      h = (Math.imul((h << 13) | (h >>> 19), 5) + 0xe6546b64) | 0;
      k = 0;
    }
  }
  if (n & 3) h ^= mix(k);
  h ^= n;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** The visitor's point in [0, 1) for an experiment in a phase. */
export function bucket(experimentId: string, visitorId: string, phase = 1): number {
  return murmur3(experimentId + ":" + (phase > 1 ? phase + ":" : "") + visitorId) / 4294967296;
}

/** The variant the bucket falls in, by weight; null when no variant has weight. */
export function pick(experiment: Experiment, visitorId: string): Variant | null {
  const variants = experiment.variants.filter((v) => v.weight > 0);
  const total = variants.reduce((sum, v) => sum + v.weight, 0);
  if (!(total > 0)) return null;
  let point = bucket(experiment.id, visitorId, phaseOf(experiment)) * total;
  for (const v of variants) {
    if (point < v.weight) return v;
    point -= v.weight;
  }
  return variants[variants.length - 1];
}

/**
 * The visitor's variant: the one they were given in this phase while it still has weight
 * (weights that change later do not move anybody), else a fresh pick in this phase (a new
 * phase, a removed variant or one now at weight 0). `seen` maps experiment ids to
 * `[variantId, phase]` (a bare variant id, the v1 form, counts as phase 1) and is updated.
 */
export function assign(experiment: Experiment, visitorId: string, seen: Seen): Variant | null {
  const phase = phaseOf(experiment);
  const [id, was] = prior(seen, experiment.id) || [];
  const before = was === phase && experiment.variants.find((v) => v.id === id && v.weight > 0);
  const variant = before || pick(experiment, visitorId);
  if (variant) seen[experiment.id] = [variant.id, phase];
  else delete seen[experiment.id];
  return variant;
}

// Variant assignment: deterministic per visitor and experiment, weighted, and sticky.
//
// bucket = murmur3_32(utf8(experimentId + ":" + visitorId), seed 0) / 2^32, in [0, 1).
// The variants are laid end to end in the order the service lists them, each as wide as
// its weight over the sum of the weights; the visitor gets the one their bucket falls in.

export interface Variant {
  id: string;
  weight: number;
  control?: boolean;
  parts?: Record<string, string>;
}

export interface Experiment {
  id: string;
  variants: Variant[];
}

/** MurmurHash3 x86 32-bit of the UTF-8 bytes of `text`. */
export function murmur3(text: string, seed = 0): number {
  const bytes = new TextEncoder().encode(text);
  const n = bytes.length;
  let h = seed >>> 0;
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    let k = bytes[i] | (bytes[i + 1] << 8) | (bytes[i + 2] << 16) | (bytes[i + 3] << 24);
    k = Math.imul(k, 0xcc9e2d51);
    k = (k << 15) | (k >>> 17);
    h ^= Math.imul(k, 0x1b873593);
    h = (h << 13) | (h >>> 19);
    h = (Math.imul(h, 5) + 0xe6546b64) | 0;
  }
  let k = 0;
  switch (n & 3) {
    case 3:
      k ^= bytes[i + 2] << 16;
    // falls through
    case 2:
      k ^= bytes[i + 1] << 8;
    // falls through
    case 1:
      k ^= bytes[i];
      k = Math.imul(k, 0xcc9e2d51);
      k = (k << 15) | (k >>> 17);
      h ^= Math.imul(k, 0x1b873593);
  }
  h ^= n;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The visitor's point in [0, 1) for an experiment. */
export function bucket(experimentId: string, visitorId: string): number {
  return murmur3(experimentId + ":" + visitorId) / 4294967296;
}

/** The variant the bucket falls in, by weight; null when no variant has weight. */
export function pick(experiment: Experiment, visitorId: string): Variant | null {
  const variants = experiment.variants.filter((v) => v.weight > 0);
  const total = variants.reduce((sum, v) => sum + v.weight, 0);
  if (!(total > 0)) return null;
  let point = bucket(experiment.id, visitorId) * total;
  for (const v of variants) {
    if (point < v.weight) return v;
    point -= v.weight;
  }
  return variants[variants.length - 1];
}

/**
 * The visitor's variant: the one they saw before while it still exists (weights that
 * change later do not move anybody), else a fresh pick. `seen` maps experiment ids to
 * variant ids and is updated.
 */
export function assign(
  experiment: Experiment,
  visitorId: string,
  seen: Record<string, string>,
): Variant | null {
  const before = experiment.variants.find((v) => v.id === seen[experiment.id]);
  const variant = before || pick(experiment, visitorId);
  if (variant) seen[experiment.id] = variant.id;
  else delete seen[experiment.id];
  return variant;
}

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

const gzipped = (file: string) => gzipSync(readFileSync(file), { level: 9 }).length;

// The budgets: the script every page loads stays at most 5 KB gzipped (4 KB before
// consent, identity, returning visitors and robustness), the opt-in auto-capture at most
// 2 KB.
test("split.min.js is at most 5 KB gzipped", () => {
  const bytes = gzipped("dist/split.min.js");
  assert.ok(bytes <= 5120, `${bytes} bytes gzipped`);
});

test("split-autotrack.min.js is at most 2 KB gzipped", () => {
  const bytes = gzipped("dist/split-autotrack.min.js");
  assert.ok(bytes <= 2048, `${bytes} bytes gzipped`);
});

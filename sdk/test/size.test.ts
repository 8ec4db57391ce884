import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

// The budget of issue 11: the script a page loads stays at most 4 KB gzipped.
test("split.min.js is at most 4 KB gzipped", () => {
  const bytes = gzipSync(readFileSync("dist/split.min.js"), { level: 9 }).length;
  assert.ok(bytes <= 4096, `${bytes} bytes gzipped`);
});

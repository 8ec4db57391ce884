// The package as its users get it: the ES module and the CommonJS build through the
// package's `exports` (the same API), each with its types (a consumer of each format is
// type-checked under Node16 resolution), and the versioned immutable path: the script tag
// of docs/sdk.md and of the README carries this version's path and the built script's
// Subresource Integrity hash, and every front that serves it names this version.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const { version } = JSON.parse(readFileSync("package.json", "utf8"));

test("the ES module and the CommonJS build export the same API", async () => {
  const esm = await import("@split/sdk");
  const cjs = createRequire(import.meta.url)("@split/sdk");
  const api = ["assignments", "convert", "flush", "identify", "init", "refresh", "setConsent", "track", "variant"];
  assert.deepEqual(Object.keys(esm).sort(), api);
  assert.deepEqual(Object.keys(cjs).sort(), api);
  for (const name of api) assert.equal(typeof cjs[name], "function");
  assert.notEqual(esm.init, cjs.init, "two builds");
});

test("both formats are typed: a consumer of each type-checks, and a wrong call does not", () => {
  // test/package/*.ts hold `@ts-expect-error` lines: if the types were `any`, tsc fails.
  execFileSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "test/package/tsconfig.json"], {
    stdio: "pipe",
  });
});

test("docs/sdk.md and the README give this version's immutable path with the built script's SRI hash", () => {
  const hash = createHash("sha384").update(readFileSync("dist/split.min.js")).digest("base64");
  const tag = execFileSync(process.execPath, ["build.mjs", "sri"], { encoding: "utf8" }).trim();
  assert.ok(tag.includes(`/sdk/v${version}/split.min.js" integrity="sha384-${hash}"`), tag);
  for (const file of ["../docs/sdk.md", "README.md"])
    assert.ok(readFileSync(file, "utf8").includes(tag), `${file} lacks this build's tag (npm run sri):\n${tag}`);
});

test("the fronts serve this version's path", () => {
  for (const file of ["../deploy/nginx/sdk-versioned.conf.in", "../deploy/nginx/sdk.conf"]) {
    const conf = readFileSync(file, "utf8");
    const versions = [...conf.matchAll(/location = \/sdk\/v(\d+\.\d+\.\d+)\//g)].map((m) => m[1]);
    assert.deepEqual([...new Set(versions)], [version], file);
  }
});

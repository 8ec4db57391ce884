// The package as its users get it: the ES module and the CommonJS build through the
// package's `exports` (the same API), each with its types (a consumer of each format is
// type-checked under Node16 resolution), and the versioned immutable path: the script tag
// of docs/sdk.md and of the README carries this version's path and the built script's
// Subresource Integrity hash, and every front that serves it names this version.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
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
  const tag = execFileSync(process.execPath, ["build.mjs", "sri"], { encoding: "utf8" }).split("\n")[0];
  assert.ok(tag.includes(`/sdk/v${version}/split.min.js" integrity="sha384-${hash}"`), tag);
  for (const file of ["../docs/sdk.md", "README.md"])
    assert.ok(readFileSync(file, "utf8").includes(tag), `${file} lacks this build's tag (npm run sri):\n${tag}`);
});

test("every release is kept as published, this version's is this build, and docs/sdk.md gives each one's tag", () => {
  const releases = readdirSync("releases");
  assert.ok(releases.includes(version), `sdk/releases/${version}/ missing: npm run release (a changed build is a new version)`);
  for (const file of ["split.min.js", "split-autotrack.min.js"])
    assert.deepEqual(readFileSync(`releases/${version}/${file}`), readFileSync(`dist/${file}`), `releases/${version}/${file} is not this build`);
  const docs = readFileSync("../docs/sdk.md", "utf8");
  for (const v of releases) {
    const hash = createHash("sha384").update(readFileSync(`releases/${v}/split.min.js`)).digest("base64");
    assert.ok(docs.includes(`/sdk/v${v}/split.min.js" integrity="sha384-${hash}"`), `docs/sdk.md lacks ${v}'s tag (npm run sri)`);
  }
});

test("the fronts serve every release by its version's path", () => {
  for (const file of ["../deploy/nginx/sdk-versioned.conf.in", "../deploy/nginx/sdk.conf"]) {
    const conf = readFileSync(file, "utf8");
    assert.ok(conf.includes("/sdk/v(?<sdk_version>[0-9]+\\.[0-9]+\\.[0-9]+)/"), file);
    assert.ok(/alias \S*(releases|RELEASES@)\/\$sdk_version\/\$sdk_file;/.test(conf), file);
  }
});

// Builds dist/split.min.js (an IIFE defining window.Split, or window.SplitTesting when
// window.Split is another library's), dist/split-autotrack.min.js (opt-in auto-capture),
// dist/index.mjs and dist/index.cjs (the API as an ES module and as CommonJS), and the
// unit tests into build/test/ for node's test runner. The browser scripts are minified by
// esbuild, then by terser (about 6% less gzipped: the core's budget needs it).
//
// `node build.mjs types`: the declarations (`tsc -p tsconfig.build.json`), one file,
// as dist/index.d.mts and dist/index.d.cts (the types of each format).
// `node build.mjs sri`: the script tag of each released version's immutable path, with its
// Subresource Integrity hash, the current version's first (docs/sdk.md holds them;
// sdk/test/package.test.ts checks them).
// `node build.mjs release`: the build as this version's release, sdk/releases/<version>/
// (the fronts serve every release at /sdk/v<version>/; a release never changes).
import { build } from "esbuild";
import { minify } from "terser";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";

const task = process.argv[2];
if (task === "types") {
  execFileSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "tsconfig.build.json"], { stdio: "inherit" });
  const types = readFileSync("build/types/index.d.ts", "utf8");
  // One self-contained file serves both formats: a relative import would resolve to a
  // file of the other format.
  if (/^(import|export .* from) /m.test(types)) throw new Error("index.d.ts imports other files");
  for (const out of ["dist/index.d.mts", "dist/index.d.cts"]) copyFileSync("build/types/index.d.ts", out);
} else if (task === "sri") {
  const { version } = JSON.parse(readFileSync("package.json", "utf8"));
  const releases = readdirSync("releases").sort((a, b) => (a === version ? -1 : b === version ? 1 : b.localeCompare(a)));
  for (const v of releases) {
    const file = v === version ? "dist/split.min.js" : `releases/${v}/split.min.js`;
    const hash = createHash("sha384").update(readFileSync(file)).digest("base64");
    console.log(
      `<script src="https://split.example.com/sdk/v${v}/split.min.js" integrity="sha384-${hash}" crossorigin="anonymous"></script>`,
    );
  }
} else if (task === "release") {
  const { version } = JSON.parse(readFileSync("package.json", "utf8"));
  mkdirSync(`releases/${version}`, { recursive: true });
  for (const file of ["split.min.js", "split-autotrack.min.js"]) copyFileSync(`dist/${file}`, `releases/${version}/${file}`);
} else {
  // A fresh clone has no dist/ (git-ignored): esbuild makes its own folders, writeFileSync not.
  mkdirSync("dist", { recursive: true });
  const common = { bundle: true, target: "es2020", legalComments: "none" };
  for (const [entry, out] of [
    ["src/global.ts", "dist/split.min.js"],
    ["src/autotrack.ts", "dist/split-autotrack.min.js"],
  ]) {
    const built = await build({ ...common, entryPoints: [entry], format: "iife", minify: true, write: false });
    const code = (await minify(built.outputFiles[0].text, { ecma: 2020, compress: { passes: 3 }, toplevel: true })).code;
    writeFileSync(out, code + "\n");
  }
  await build({ ...common, entryPoints: ["src/index.ts"], outfile: "dist/index.mjs", format: "esm" });
  await build({ ...common, entryPoints: ["src/index.ts"], outfile: "dist/index.cjs", format: "cjs" });
  await build({
    entryPoints: readdirSync("test").filter((f) => f.endsWith(".test.ts")).map((f) => "test/" + f),
    outdir: "build/test",
    outExtension: { ".js": ".mjs" },
    bundle: true,
    platform: "node",
    format: "esm",
    packages: "external",
  });
}

// Builds dist/split.min.js (an IIFE defining window.Split, or window.SplitTesting when
// window.Split is another library's), dist/split-autotrack.min.js (opt-in auto-capture),
// dist/index.mjs (the API as an ES module; its types come from `tsc -p
// tsconfig.build.json`), and the unit tests into build/test/ for node's test runner.
// The browser scripts are minified by esbuild, then by terser (about 6% less gzipped:
// the core's 4 KB budget needs it).
import { build } from "esbuild";
import { minify } from "terser";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";

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
await build({
  entryPoints: readdirSync("test").filter((f) => f.endsWith(".test.ts")).map((f) => "test/" + f),
  outdir: "build/test",
  outExtension: { ".js": ".mjs" },
  bundle: true,
  platform: "node",
  format: "esm",
  packages: "external",
});

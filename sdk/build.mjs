// Builds dist/split.min.js (an IIFE defining window.Split) and dist/index.mjs (the same
// API as an ES module), and the unit tests into build/test/ for node's test runner.
import { build } from "esbuild";
import { readdirSync } from "node:fs";

const common = { entryPoints: ["src/index.ts"], bundle: true, target: "es2020", legalComments: "none" };
await build({ ...common, outfile: "dist/split.min.js", format: "iife", globalName: "Split", minify: true });
await build({ ...common, outfile: "dist/index.mjs", format: "esm" });
await build({
  entryPoints: readdirSync("test").filter((f) => f.endsWith(".test.ts")).map((f) => "test/" + f),
  outdir: "build/test",
  outExtension: { ".js": ".mjs" },
  bundle: true,
  platform: "node",
  format: "esm",
  packages: "external",
});

// What the real-browser tests share: the addresses that e2e/tests/sdk.rs gives (FRONT, the
// nginx before ingest and config-api that serves the built SDK; CLICKHOUSE_URL and
// CLICKHOUSE_DATABASE, where the consumer stores events; ACCESS_LOG, the front's), a
// fixture site on another origin, Debian's Chromium, and helpers that keep each test to
// its own browser context, requests and rows.
import { before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { chromium } from "playwright-core";

export const { FRONT, CLICKHOUSE_URL, CLICKHOUSE_DATABASE, ACCESS_LOG, SNAPSHOT } = process.env;
export const PK = "pk_sdk";
export const EXP = "exp_sdk_hero";
export const PARTS = {
  var_sdk_a: { headline: "Alpha <b>headline</b>", cta: "Buy A" },
  var_sdk_b: { headline: "Beta <b>headline</b>", cta: "Buy B" },
};
/** Each test's time limit: a hung browser or page fails its test instead of the run. */
export const T = { timeout: 120_000 };

/** The SDK's tags: the core, its init, and what else the page needs in its head. */
export function head({ init = "", extra = "", ids = [EXP, "exp_sdk_draft", "exp_sdk_spa"] } = {}) {
  return `<meta charset="utf-8">
<script src="${FRONT}/sdk/v1/split.min.js"></script>
<script>window.splitReady = Split.init({ baseUrl: ${JSON.stringify(FRONT)}, publicKey: "${PK}",
  experimentIds: ${JSON.stringify(ids)}, debug: true${init} });</script>${extra}`;
}

export const heroRoot = `<div data-split-experiment="${EXP}">
<h1 data-split-part="headline">Original headline</h1>
<button data-split-part="cta">Original</button><p data-split-part="missing">Kept</p>
</div>`;

export const landing = `<!doctype html><html><head>${head()}</head><body>${heroRoot}</body></html>`;

/**
 * The fixture site: `pages(url)` answers a page's HTML, a list of chunks and pauses
 * (`["<head>…", 1500, "<body>…"]`: a page whose parsing outlasts the answer), or
 * `{ headers, body }` (a page with its own response headers, a CSP); undefined answers the
 * landing page. `args` are more Chromium flags (`--host-resolver-rules=…`).
 */
export let origin;
let server;
export let browser;

export function site(pages, { args = [] } = {}) {
  before(async () => {
    assert.ok(FRONT && CLICKHOUSE_URL && CLICKHOUSE_DATABASE && ACCESS_LOG && SNAPSHOT, "run me from e2e/tests/sdk.rs");
    server = http.createServer(async (req, res) => {
      res.setHeader("content-type", "text/html; charset=utf-8");
      let page = pages(new URL(req.url, "http://x")) ?? landing;
      if (page.body != null) {
        for (const [name, value] of Object.entries(page.headers)) res.setHeader(name, value);
        page = page.body;
      }
      if (typeof page === "string") return res.end(page);
      for (const chunk of page) if (typeof chunk === "number") await sleep(chunk);
      else res.write(chunk);
      res.end();
    });
    await new Promise((r) => server.listen(0, "127.0.0.1", r));
    origin = `http://127.0.0.1:${server.address().port}`;
    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
      args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", ...args],
    });
  }, T);
  after(async () => {
    await browser?.close();
    server?.closeAllConnections?.();
    server?.close();
  }, T);
}

/**
 * A new browser context (its own storage); `gets` and `posts` record the config GETs and
 * the standard-form POSTs ({ headers, events, sentAt, at, keepalive }) of this context
 * only, so that each test checks its own requests and runs alone. Each sendBeacon call
 * (which Playwright does not see once the page is gone) is recorded in the tab's
 * sessionStorage, `test_beacons` ({ bytes, ok }), for the next page of the same origin.
 */
export async function context(init, storageState) {
  // Chromium's own User-Agent without "Headless": the ingest flags HeadlessChrome as a bot
  // (is_bot), and these pages stand for a visitor's.
  const userAgent = `Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/${browser.version()} Safari/537.36`;
  const ctx = await browser.newContext({ storageState, userAgent });
  await ctx.addInitScript(() => {
    const send = navigator.sendBeacon.bind(navigator);
    navigator.sendBeacon = (url, body) => {
      const ok = send(url, body);
      const list = JSON.parse(sessionStorage.getItem("test_beacons") || "[]");
      sessionStorage.setItem("test_beacons", JSON.stringify(list.concat({ bytes: new Blob([body]).size, ok })));
      return ok;
    };
  });
  if (init) await ctx.addInitScript(init);
  const gets = [];
  const posts = [];
  ctx.on("request", (r) => {
    if (r.url() === FRONT + "/api/v1/experiments" && r.method() === "GET") gets.push(r.headers());
    if (r.url() === FRONT + "/api/v1/analytics" && r.method() === "POST" && r.headers()["x-public-key"]) {
      const body = JSON.parse(r.postData());
      posts.push({ headers: r.headers(), events: body.events, sentAt: body.sentAt, at: Date.now() });
    }
  });
  return { ctx, gets, posts };
}

export async function open(ctx, path = "/landing?utm_source=news&utm_campaign=launch") {
  const page = await ctx.newPage();
  page.on("console", (m) => console.log("  [page]", m.text().slice(0, 300)));
  await page.goto(origin + path);
  await page.evaluate(() => window.splitReady);
  return page;
}

/** The session id of a page's SDK (kept in localStorage). */
export const sessionOf = (page) => page.evaluate(() => JSON.parse(localStorage.getItem("split_session")).id);

export async function query(sql) {
  const r = await fetch(`${CLICKHOUSE_URL}/?database=${CLICKHOUSE_DATABASE}`, {
    method: "POST",
    body: sql + " FORMAT JSONEachRow",
  });
  const text = await r.text();
  assert.ok(r.ok, text);
  return text.split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

/** Rows of `sql` once `done(rows)` holds, within `seconds`. */
export async function rowsWhen(what, sql, done, seconds = 60) {
  return eventually(what, async () => {
    const rows = await query(sql);
    return done(rows) && rows;
  }, seconds);
}

export async function eventually(what, probe, seconds = 60) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = await probe();
    if (value) return value;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await sleep(250);
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * An init script: from the document's start, for `ms` milliseconds, each animation frame
 * records what the first <h1> shows, as `[text, visibility]` in `window.frames_`.
 */
export function sampleFrames(ms) {
  return `window.frames_ = [];
(() => {
  const t0 = performance.now();
  const look = () => {
    const h1 = document.querySelector("h1");
    if (h1) frames_.push([h1.textContent, getComputedStyle(h1).visibility]);
    if (performance.now() - t0 < ${ms}) requestAnimationFrame(look);
  };
  requestAnimationFrame(look);
})();`;
}

/** Delays the answers to the context's experiments requests by `ms`. */
export async function slowAnswers(ctx, ms) {
  await ctx.route(FRONT + "/api/v1/experiments", async (route) => {
    await sleep(ms);
    await route.continue();
  });
}

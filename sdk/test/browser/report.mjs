// The HTML report of `experiment-results --html` in real Chromium, from its file:// URL with
// the network cut (an offline context; any request that is not for the file itself is
// recorded and aborted): what a phone shows of it, a screenshot, and the numbers it reads.
// Run by e2e/tests/demo.rs: REPORT (the file), SCREENSHOT (where to write the PNG).
// Prints one JSON line: the requests other than the file, the page's overflow, and per
// section its SRM status, rows (variant, visitors, converted), verdicts and chart series.
import { chromium } from "playwright-core";
import { pathToFileURL } from "node:url";

const { REPORT, SCREENSHOT } = process.env;
if (!REPORT || !SCREENSHOT) throw new Error("run me from e2e/tests/demo.rs (REPORT, SCREENSHOT)");

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
try {
  // A phone's viewport, offline.
  const context = await browser.newContext({
    viewport: { width: 390, height: 844 },
    deviceScaleFactor: 2,
    isMobile: true,
    offline: true,
  });
  const url = pathToFileURL(REPORT).href;
  const requests = [];
  context.on("request", (r) => r.url() !== url && requests.push(r.url()));
  await context.route(/^(?!file:)/, (route) => route.abort());
  const page = await context.newPage();
  await page.goto(url, { timeout: 20_000 });
  await page.screenshot({ path: SCREENSHOT, fullPage: true, timeout: 20_000 });
  const found = await page.evaluate(() => ({
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    sections: [...document.querySelectorAll("section.result")].map((s) => ({
      key: s.dataset.key,
      phase: Number(s.dataset.phase),
      srm: s.querySelector(".srm")?.textContent,
      range: s.querySelector(".range")?.textContent,
      rows: [...s.querySelectorAll("table.variants tbody tr")].map((tr) => ({
        variant: tr.dataset.variant,
        exposed: Number(tr.querySelector(".exposed").textContent),
        converted: Number(tr.querySelector(".converted").textContent),
        visible: tr.getBoundingClientRect().height > 0,
      })),
      verdicts: Object.fromEntries(
        [...s.querySelectorAll("li.verdict")].map((li) => [li.dataset.variant, li.textContent.replace(/^[^:]*: /, "")]),
      ),
      axis: [...s.querySelectorAll("svg.chart text.axis")].map((t) => t.textContent),
      chart: [...s.querySelectorAll("svg.chart polyline.diff")].map((line) => ({
        variant: line.dataset.variant,
        points: line.points.numberOfItems,
        width: line.ownerSVGElement.getBoundingClientRect().width,
        bands: s.querySelectorAll(`svg.chart polygon.band[data-variant="${line.dataset.variant}"]`).length,
      })),
    })),
  }));
  console.log(JSON.stringify({ requests, ...found }));
} finally {
  await browser.close();
}

// The opt-in auto-capture (split-autotrack.min.js) in real Chromium
// through the real pipeline: goal clicks, conversions (attribute and URL rule), the
// page's measures at unload, bounces and rate-limited errors, each checked in ClickHouse.
import { test } from "node:test";
import assert from "node:assert/strict";
import { EXP, FRONT, T, context, head, heroRoot, open, origin, query, rowsWhen, sessionOf, site, sleep } from "./kit.mjs";

const autotrack = `<script src="${FRONT}/sdk/v1/split-autotrack.min.js" data-conversion-url="^/thanks"></script>`;
const page = (body) => `<!doctype html><html><head>${head({ extra: autotrack })}</head>
<body style="margin:0">${body}<div style="height:3000px"></div><p id="end">end</p></body></html>`;

site((url) => {
  if (url.pathname.startsWith("/next")) return "<p>next page</p>";
  if (url.pathname === "/thanks") return page("<p>Thank you</p>");
  return page(heroRoot.replace("</div>", '<a data-split-goal="signup" href="#">Sign up</a>' +
    '<a data-split-goal="newsletter" href="#">Newsletter</a></div>') +
    '<button data-split-conversion="buy">Buy</button><button data-split-conversion="gift">Gift</button>');
});

const rowsOf = (session) =>
  query(`SELECT event_name, experiment_id, click_target, conversion, scroll_depth, time_on_page, load_time
         FROM events FINAL WHERE session_id = '${session}'`);

test("goal and conversion clicks, errors (at most 5), and the page's measures at unload", T, async () => {
  const { ctx } = await context();
  const p = await open(ctx, "/landing");
  const session = await sessionOf(p);
  await p.click("[data-split-goal]");
  await p.click("[data-split-conversion]");
  await p.evaluate(() => {
    for (let i = 0; i < 7; i++) setTimeout(() => { throw new Error("boom " + i); });
    window.scrollTo(0, document.documentElement.scrollHeight / 2 - innerHeight);
  });
  await sleep(300);
  await p.goto(origin + "/next"); // unload: the measures go with the beacon
  const rows = await rowsWhen("the captured events", `SELECT event_name FROM events FINAL WHERE session_id = '${session}'`, (r) => r.length >= 11, 30);
  await sleep(500);
  const all = await rowsOf(session);
  const named = (name) => all.filter((r) => r.event_name === name);
  assert.deepEqual(
    [...new Set(all.map((r) => r.event_name))].sort(),
    ["click", "conversion", "dwell_time", "error", "impression", "performance", "scroll_depth"],
    JSON.stringify(rows),
  );
  assert.deepEqual(named("click").map((r) => [r.experiment_id, r.click_target]), [[EXP, "signup"]]);
  assert.deepEqual(named("conversion").map((r) => [r.experiment_id, r.conversion, r.click_target]), [[EXP, 1, "buy"]]);
  assert.equal(named("error").length, 5, "rate-limited");
  assert.match(named("error")[0].click_target, /boom/);
  const [scroll] = named("scroll_depth");
  assert.ok(scroll.scroll_depth >= 40 && scroll.scroll_depth <= 60, JSON.stringify(scroll));
  assert.ok(named("dwell_time")[0].time_on_page > 0);
  assert.ok(named("performance")[0].load_time > 0);
  await ctx.close();
});

test("the snapshot's metrics read the goal and conversion clicks, per visitor and per variant", T, async () => {
  const { ctx } = await context();
  const p = await open(ctx, "/landing");
  const session = await sessionOf(p);
  await p.click("[data-split-goal]");
  await p.click("[data-split-conversion]");
  // A goal and a conversion of other targets, which neither metric counts.
  await p.click('[data-split-goal="newsletter"]');
  await p.click('[data-split-conversion="gift"]');
  // Sent now, from the page (an unload beacon would carry Chromium's headless User-Agent:
  // a bot's event, which counts, as the visitor's exposure was the page's).
  await p.evaluate(() => window.Split.flush());
  const visitor = `(SELECT visitor_id FROM events WHERE session_id = '${session}')`;
  await rowsWhen(
    "the visitor's four clicks",
    `SELECT event_name FROM events FINAL WHERE session_id = '${session}'
     AND experiment_id = '${EXP}' AND event_name IN ('click', 'conversion')`,
    (rows) => rows.length === 4,
    30,
  );
  const values = await rowsWhen(
    "the visitor's metrics",
    `SELECT metric_id, role, value FROM experiment_metric_visitors
     WHERE experiment_id = '${EXP}' AND visitor_id IN ${visitor} ORDER BY position`,
    (rows) => rows.length === 2,
    30,
  );
  assert.deepEqual(values, [
    { metric_id: "signup", role: "goal", value: 1 },
    { metric_id: "buys", role: "secondary", value: 1 },
  ]);
  const [{ variant_id }] = await query(`SELECT variant_id FROM experiment_metric_visitors
    WHERE experiment_id = '${EXP}' AND visitor_id IN ${visitor} LIMIT 1`);
  // The variant's results: its visitors' values, this one's and those of the other
  // tests' pages (exposed by the page, not left out by a bot's unload beacon).
  const results = await query(`SELECT metric_id, visitors, value FROM experiment_metric_results
    WHERE experiment_id = '${EXP}' AND variant_id = '${variant_id}' ORDER BY position`);
  const perVisitor = await query(`SELECT metric_id, count() AS visitors, avg(value) AS value
    FROM experiment_metric_visitors WHERE experiment_id = '${EXP}' AND variant_id = '${variant_id}'
    GROUP BY metric_id, position ORDER BY position`);
  const rows = (rs) => rs.map((r) => [r.metric_id, Number(r.visitors), r.value]);
  assert.deepEqual(rows(results).map((r) => r[0]), ["signup", "buys"]);
  assert.deepEqual(rows(results), rows(perVisitor));
  await ctx.close();
});

test("a page left without any interaction is a bounce; a URL rule converts on /thanks", T, async () => {
  const { ctx } = await context();
  const p = await open(ctx, "/landing");
  const session = await sessionOf(p);
  await sleep(200);
  await p.goto(origin + "/thanks"); // the visitor's assignment converts here
  await p.evaluate(() => window.splitReady);
  await p.evaluate(() => Split.flush());
  const rows = await rowsWhen(
    "the bounce and the conversion",
    `SELECT event_name FROM events FINAL WHERE session_id = '${session}' AND event_name IN ('bounce', 'conversion')`,
    (r) => r.length >= 2,
    30,
  );
  assert.deepEqual(rows.map((r) => r.event_name).sort(), ["bounce", "conversion"]);
  const [conversion] = (await rowsOf(session)).filter((r) => r.event_name === "conversion");
  assert.deepEqual([conversion.experiment_id, conversion.conversion, conversion.click_target], [EXP, 1, "url"]);
  await ctx.close();
});

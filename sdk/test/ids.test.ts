// Ids: the event and visitor ids of the built script are RFC 9562 v4
// UUIDs with 122 random bits: over many ids, every hex digit but the version's (always 4)
// and the variant's (8, 9, a or b) takes all 16 values, evenly.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Browser, INIT, page, settle } from "./page";

const N = 100_000;
const SHAPE = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** `n` event ids from one page of the built script. */
async function eventIds(n: number, noRandomUUID: boolean): Promise<string[]> {
  const p = page(new Browser(), { noRandomUUID });
  await p.Split.init({ ...INIT, debug: false });
  for (let i = 0; i < n; i++) {
    p.Split.track("click", "exp_a");
    if (i % 400 === 399) await settle(0); // the queue holds 500 at most
  }
  await p.Split.flush();
  return p.events().filter((e) => e.eventName === "click").map((e) => e.eventId);
}

/** Per hex digit (dashes removed): its values' counts; fails on a fixed or uneven digit. */
function checkDigits(ids: string[]): void {
  assert.equal(new Set(ids).size, ids.length, "distinct ids");
  const counts = Array.from({ length: 32 }, () => new Array(16).fill(0));
  for (const id of ids) {
    assert.match(id, SHAPE);
    const hex = id.replace(/-/g, "");
    for (let i = 0; i < 32; i++) counts[i][parseInt(hex[i], 16)]++;
  }
  for (let i = 0; i < 32; i++) {
    const used = counts[i].map((c, v) => [c, v]).filter(([c]) => c > 0).map(([, v]) => v);
    if (i === 12) assert.deepEqual(used, [4], "the version digit");
    else if (i === 16) {
      assert.deepEqual(used, [8, 9, 10, 11], "the variant digit");
      const chi = used.reduce((s, v) => s + (counts[i][v] - ids.length / 4) ** 2 / (ids.length / 4), 0);
      assert.ok(chi < 30, `variant digit uneven: chi-square ${chi}`);
    } else {
      assert.equal(used.length, 16, `digit ${i} takes ${used.length} values: ${used}`);
      // 15 degrees of freedom: 50 is past p = 1e-5, so an even digit fails about never.
      const chi = counts[i].reduce((s, c) => s + (c - ids.length / 16) ** 2 / (ids.length / 16), 0);
      assert.ok(chi < 50, `digit ${i} uneven: chi-square ${chi}`);
    }
  }
}

test(`${N} event ids from crypto.getRandomValues (every page, http too): 122 random bits`, async () => {
  checkDigits(await eventIds(N, true));
});

test("visitor ids: 2,000 fresh browsers, 2,000 distinct v4 ids, no fixed digit", async () => {
  const ids: string[] = [];
  for (let i = 0; i < 2000; i++) {
    const b = new Browser();
    const p = page(b, { noRandomUUID: i % 2 === 0 });
    await p.Split.init({ ...INIT, debug: false });
    p.Split.variant("exp_a");
    ids.push(b.local.getItem("split_vid")!);
  }
  assert.equal(new Set(ids).size, ids.length);
  for (const id of ids) assert.match(id, SHAPE);
  const hex = ids.map((id) => id.replace(/-/g, ""));
  for (let i = 0; i < 32; i++) {
    const values = new Set(hex.map((h) => h[i])).size;
    assert.equal(values, i === 12 ? 1 : i === 16 ? 4 : 16, `digit ${i}`);
  }
});

// Never throw, never lose, on the built script in a fake page: a field
// that cannot be serialized is refused at `track` with a debug line while the other events
// go; no rejection or exception reaches the page; init and the auto-capture survive a
// hostile page (read-only history.pushState, no sendBeacon) and a bad data-conversion-url.
import { test } from "node:test";
import assert from "node:assert/strict";
import vm from "node:vm";
import { Browser, INIT, page, settle } from "./page";

/** Runs `body`, failing on any unhandled rejection or uncaught exception meanwhile. */
async function noEscapes(body: () => Promise<void>): Promise<void> {
  const escaped: unknown[] = [];
  const note = (e: unknown) => escaped.push(e);
  process.on("unhandledRejection", note);
  process.on("uncaughtException", note);
  try {
    await body();
    await settle(50);
  } finally {
    process.off("unhandledRejection", note);
    process.off("uncaughtException", note);
  }
  assert.deepEqual(escaped, [], "nothing reaches the page");
}

for (const [kind, bad] of [
  ["a circular field", () => {
    const detail: Record<string, unknown> = { a: 1 };
    detail.self = detail;
    return detail;
  }],
  ["a BigInt field", () => 10n],
] as const)
  test(`${kind} is refused at track, with a debug line; the other events go`, async () => {
    await noEscapes(async () => {
      const p = page(new Browser());
      await p.Split.init(INIT);
      assert.ok(p.Split.variant("exp_a"), "assigned: an impression queued");
      assert.doesNotThrow(() => p.Split.track("add_to_cart", "exp_a", { detail: bad() }));
      assert.ok(p.logs.some((l) => /track: unserializable/.test(l)), p.logs.join("\n"));
      for (let i = 0; i < 10; i++) p.Split.track("click", "exp_a", { clickTarget: "#b" + i });
      await p.Split.flush();
      const names = p.events().map((e) => e.eventName);
      assert.deepEqual(names.sort(), ["impression", ...Array(10).fill("click")].sort());
      p.Split.track("click", "exp_a", { clickTarget: "#last" });
      p.Split.track("add_to_cart", "exp_a", { detail: bad() });
      assert.doesNotThrow(() => p.leave());
      assert.ok(p.beacons.flatMap((b) => b.events).some((e) => e.clickTarget === "#last"), "the unload beacon went");
      assert.deepEqual(p.errors, []);
    });
  });

test("init survives a read-only history.pushState: variants, events and route changes still work", async () => {
  await noEscapes(async () => {
    const p = page(new Browser(), {
      setup: (w) => {
        const push = () => {};
        Object.defineProperty(w.history, "pushState", {
          get: () => push,
          set: () => {
            throw new TypeError("pushState is read-only");
          },
        });
      },
    });
    await p.Split.init(INIT);
    assert.ok(p.Split.variant("exp_a"), "the answer was fetched and applied");
    await p.Split.flush();
    assert.deepEqual(p.events().map((e) => e.eventName), ["impression"]);
    p.window.history.replaceState(null, "", "/next"); // still followed
  });
});

test("a missing sendBeacon: the unload keeps the events for the next page instead of throwing", async () => {
  await noEscapes(async () => {
    const b = new Browser();
    const p = page(b, { setup: (w) => delete w.navigator.sendBeacon });
    await p.Split.init(INIT);
    p.Split.track("click", "exp_a", { clickTarget: "#kept" });
    assert.doesNotThrow(() => p.leave());
    const kept = b.stored().flatMap((k) => (k.startsWith("split_kept") ? JSON.parse(b.local.getItem(k)!) : []));
    assert.ok(kept.some((e: { clickTarget: string }) => e.clickTarget === "#kept"), JSON.stringify(kept));
  });
});

test("the auto-capture with an invalid data-conversion-url loads, and still sends its measures", async () => {
  await noEscapes(async () => {
    const p = page(new Browser(), { autotrackAttributes: { "data-conversion-url": "(" } });
    await p.Split.init(INIT);
    p.Split.variant("exp_a");
    assert.doesNotThrow(() => p.autotrack());
    p.leave();
    const names = p.events().map((e) => e.eventName);
    assert.ok(names.includes("scroll_depth") && names.includes("dwell_time"), names.join());
    assert.deepEqual(p.errors, []);
  });
});

test("bad options and a frozen JSON: init never throws or rejects; the page keeps working", async () => {
  await noEscapes(async () => {
    for (const bad of [null, undefined, {}, { ...INIT, experimentIds: "exp_a" }, { ...INIT, consent: 42 }]) {
      const p = page(new Browser(), { setup: (w) => vm.runInContext("Object.freeze(JSON)", w) });
      await assert.doesNotReject(async () => p.Split.init(bad));
      assert.doesNotThrow(() => {
        p.Split.track("click", "exp_a");
        p.Split.variant("exp_a");
        p.leave();
      });
      assert.deepEqual(p.errors, []);
    }
    const ok = page(new Browser(), { setup: (w) => vm.runInContext("Object.freeze(JSON)", w) });
    await ok.Split.init(INIT);
    assert.ok(ok.Split.variant("exp_a"));
    await ok.Split.flush();
    assert.deepEqual(ok.events().map((e) => e.eventName), ["impression"]);
  });
});

test("kept events older than a day are dropped and counted to onError; a younger one goes, once", async () => {
  const b = new Browser();
  const now = Date.now();
  const event = (eventId: string, hours: number) => ({
    eventName: "click",
    experimentId: "exp_a",
    sessionId: "s",
    eventId,
    timestamp: now - hours * 3600_000,
  });
  b.local.setItem("split_kept:other-tab", JSON.stringify([event("old", 25), event("young", 23)]));
  b.local.setItem("split_kept:third-tab", JSON.stringify([event("young", 23)]));
  const errors: string[] = [];
  const p = page(b);
  await p.Split.init({ ...INIT, onError: (e: Error) => errors.push(e.message) });
  await p.Split.flush();
  assert.deepEqual(p.events().map((e) => e.eventId), ["young"]);
  assert.deepEqual(errors, ["split: 1 events dropped: expired"]);
  assert.deepEqual(b.stored().filter((k) => k.startsWith("split_kept")), [], "read, sent, removed");
});

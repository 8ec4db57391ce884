import { test } from "node:test";
import assert from "node:assert/strict";
import { beaconBodies, retryDelay, Sender, utf8Length, type Transport } from "../src/batch";

/** A transport whose answers and timers the test controls. */
function fake(statuses: number[] = []) {
  const posts: string[] = [];
  const beacons: string[] = [];
  const waits: { ms: number; go: () => void }[] = [];
  let beaconOk = true;
  const transport: Transport = {
    post: async (body) => {
      posts.push(body);
      return { status: statuses.shift() ?? 202, retryAfter: null };
    },
    beacon: (body) => {
      if (beaconOk) beacons.push(body);
      return beaconOk;
    },
    wait: (ms) => new Promise((go) => waits.push({ ms, go })),
    online: async () => {},
  };
  return { transport, posts, beacons, waits, refuseBeacons: () => (beaconOk = false) };
}

const tick = () => new Promise((r) => setImmediate(r));
const ev = (i: number, extra = "") => ({ eventId: `id-${i}`, eventName: "click", extra });

test("five queued events go at once, in one request", async () => {
  const f = fake();
  const s = new Sender("pk_x", f.transport, () => {});
  for (let i = 0; i < 5; i++) s.add(ev(i));
  await tick(); // no timer fired, no flush: the fifth event sent the batch
  assert.equal(f.posts.length, 1, "the fifth event sends at once");
  assert.equal(JSON.parse(f.posts[0]).events.length, 5);
  assert.ok(Math.abs(JSON.parse(f.posts[0]).sentAt - Date.now()) < 60000, "sentAt: the client's clock");
  assert.equal(s.queue.length, 0);
});

test("fewer than five wait for the 5-second timer", async () => {
  const f = fake();
  const s = new Sender("pk_x", f.transport, () => {});
  for (let i = 0; i < 4; i++) s.add(ev(i));
  await tick();
  assert.equal(f.posts.length, 0);
  assert.deepEqual(f.waits.map((w) => w.ms), [5000], "one timer for the batch");
  f.waits[0].go(); // the timer fires; no flush: the timer alone sends them
  await tick();
  assert.equal(f.posts.length, 1, "the timer sends the four");
  assert.equal(JSON.parse(f.posts[0]).events.length, 4);
  assert.equal(s.queue.length, 0);
});

test("a send at five restarts the 5-second timer for the next events", async () => {
  const f = fake();
  const s = new Sender("pk_x", f.transport, () => {});
  s.add(ev(0)); // arms a timer
  for (let i = 1; i < 5; i++) s.add(ev(i)); // sent at once
  await tick();
  assert.equal(f.posts.length, 1, "the fifth event sends without any timer or flush");
  s.add(ev(5)); // arms a new timer
  assert.equal(f.waits.length, 2, "the next event arms a timer of its own");
  f.waits[0].go();
  await tick();
  assert.equal(f.posts.length, 1, "the first timer no longer sends");
  f.waits[1].go(); // no flush: the new timer alone sends the sixth event
  await tick();
  assert.equal(f.posts.length, 2, "the new timer sends the sixth event");
  assert.deepEqual(JSON.parse(f.posts[1]).events.map((e: { eventId: string }) => e.eventId), ["id-5"]);
});

test("events queued while a full batch is in flight wait for their own timer", async () => {
  let answer: (v: { status: number; retryAfter: null }) => void = () => {};
  const f = fake();
  f.transport.post = (body) => {
    f.posts.push(body);
    return new Promise((r) => (answer = r));
  };
  const s = new Sender("pk_x", f.transport, () => {});
  for (let i = 0; i < 5; i++) s.add(ev(i));
  await tick();
  for (let i = 5; i < 9; i++) s.add(ev(i)); // during the request
  answer({ status: 202, retryAfter: null });
  await tick();
  await tick();
  assert.equal(f.posts.length, 1, "the four wait");
  assert.equal(s.queue.length, 4);
  f.waits.at(-1)!.go();
  await tick();
  answer({ status: 202, retryAfter: null });
  await tick();
  assert.equal(f.posts.length, 2);
  assert.equal(JSON.parse(f.posts[1]).events.length, 4);
});

test("a request never holds more than five events", async () => {
  const f = fake();
  const s = new Sender("pk_x", f.transport, () => {});
  s.queue = Array.from({ length: 12 }, (_, i) => ev(i));
  await s.flush();
  assert.deepEqual(f.posts.map((p) => JSON.parse(p).events.length), [5, 5, 2]);
});

test("503, 429 and network errors are retried with the same events; other 4xx dropped", async () => {
  const f = fake([503, 0, 429, 202, 400]);
  const logs: string[] = [];
  const s = new Sender("pk_x", f.transport, (m) => logs.push(m));
  s.queue = Array.from({ length: 5 }, (_, i) => ev(i));
  const done = s.flush();
  for (let i = 0; i < 3; i++) {
    while (f.waits.length <= i) await tick();
    f.waits[i].go();
  }
  await done;
  assert.equal(f.posts.length, 4);
  const events = f.posts.map((p) => JSON.stringify(JSON.parse(p).events));
  assert.ok(events.every((e) => e === events[0]), "retries carry the same events and ids");
  s.queue = [ev(9)];
  await s.flush();
  assert.equal(s.queue.length, 0, "a 400 is not retried");
  assert.ok(logs.some((m) => m.includes("dropped")));
});

test("retry delays grow, are jittered, capped and honour Retry-After", () => {
  assert.equal(retryDelay(1, null, 0, 0), 500);
  assert.equal(retryDelay(1, null, 0.999999, 0), 1000);
  assert.equal(retryDelay(4, null, 0, 0), 4000);
  assert.equal(retryDelay(30, null, 1, 0), 60000);
  assert.equal(retryDelay(1, "7", 0, 0), 7000);
  const now = Date.parse("2026-11-22T10:00:00Z");
  assert.equal(retryDelay(1, "Sun, 22 Nov 2026 10:00:20 GMT", 0, now), 20000);
  assert.equal(retryDelay(1, "garbage", 0, now), 500);
});

test("unload beacons split under 60 KB, pkey in each body; events leave only when taken", () => {
  const f = fake();
  const s = new Sender("pk_x", f.transport, () => {});
  const big = "é".repeat(5000); // 10 KB of UTF-8 each
  s.queue = Array.from({ length: 14 }, (_, i) => ev(i, big));
  s.unload();
  assert.ok(f.beacons.length >= 3);
  const sent = f.beacons.flatMap((b) => {
    assert.ok(utf8Length(b) <= 60000, `${utf8Length(b)} bytes`);
    const body = JSON.parse(b);
    assert.equal(body.pkey, "pk_x");
    assert.ok(Math.abs(body.sentAt - Date.now()) < 60000, "sentAt: the client's clock");
    return body.events.map((e: { eventId: string }) => e.eventId);
  });
  assert.deepEqual(sent, Array.from({ length: 14 }, (_, i) => `id-${i}`));
  assert.equal(s.queue.length, 0);

  const g = fake();
  g.refuseBeacons();
  const t = new Sender("pk_x", g.transport, () => {});
  t.queue = [ev(1)];
  t.unload();
  assert.equal(t.queue.length, 1, "a refused beacon keeps its events");
});

test("an event too large for any beacon stays queued, the rest go", () => {
  const { bodies, tooLarge } = beaconBodies("pk_x", [ev(1, "x".repeat(70000)), ev(2)], 60000);
  assert.equal(tooLarge.length, 1);
  assert.equal(bodies.length, 1);
  assert.equal(bodies[0].events[0].eventId, "id-2");
});

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  beaconBodies,
  BUDGET,
  FLUSH_BOUND_MS,
  MAX_ATTEMPTS,
  MAX_QUEUE,
  retryDelay,
  sender,
  utf8Length,
  type Answer,
  type Transport,
} from "../src/batch";

/**
 * A transport that behaves as Chromium does: keepalive requests and beacons share one
 * budget of 64 KiB of bodies in flight; a keepalive fetch past it fails (a TypeError, no
 * status), a beacon past it is refused (`false`); beacons queued at unload stay in flight
 * (the page is gone). Answers come from `statuses` (202 when empty) or, with `manual`, when
 * the test calls `answer()`. Timers fire only when the test fires them.
 */
function browser(statuses: (number | Answer)[] = [], manual = false) {
  const posts: { body: string; keepalive: boolean }[] = [];
  const beacons: string[] = [];
  const waits: { ms: number; go: () => void }[] = [];
  const kept: unknown[][] = [];
  const open: ((a: Answer) => void)[] = [];
  let inFlight = 0;
  const transport: Transport = {
    post: (body, keepalive) => {
      posts.push({ body, keepalive });
      const bytes = utf8Length(body);
      if (keepalive && inFlight + bytes > BUDGET) return Promise.reject(new TypeError("Failed to fetch"));
      if (keepalive) inFlight += bytes;
      const answered = new Promise<Answer>((resolve) => {
        if (manual) open.push(resolve);
        else {
          const s = statuses.shift() ?? 202;
          resolve(typeof s === "number" ? { status: s, retryAfter: null } : s);
        }
      });
      return answered.finally(() => keepalive && (inFlight -= bytes));
    },
    beacon: (body) => {
      const bytes = utf8Length(body);
      if (inFlight + bytes > BUDGET) return false;
      inFlight += bytes;
      beacons.push(body);
      return true;
    },
    wait: (ms) => new Promise((go) => waits.push({ ms, go })),
    keep: (events) => kept.push(events),
  };
  /** Fires the timers of `ms` armed so far. */
  const fire = (ms: number) => waits.filter((w) => w.ms === ms).forEach((w) => w.go());
  const answer = (status = 202) => open.shift()?.({ status, retryAfter: null });
  return { transport, posts, beacons, waits, kept, fire, answer, inFlight: () => inFlight };
}

const tick = async () => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
};
const ev = (i: number, extra = "") => ({ eventId: `id-${i}`, eventName: "click", extra });
const ids = (body: string) => JSON.parse(body).events.map((e: { eventId: string }) => e.eventId);

test("five queued events go at once, in one request, with no timer", async () => {
  const b = browser();
  const s = sender("pk_x", b.transport, () => {});
  for (let i = 0; i < 5; i++) s.add(ev(i));
  await tick(); // no timer fired, no flush: the fifth event sent the batch
  assert.equal(b.posts.length, 1, "the fifth event sends at once");
  assert.deepEqual(ids(b.posts[0].body), ["id-0", "id-1", "id-2", "id-3", "id-4"]);
  assert.ok(Math.abs(JSON.parse(b.posts[0].body).sentAt - Date.now()) < 60000, "sentAt: the client's clock");
  assert.equal(b.posts[0].keepalive, true);
  assert.equal(s.queue.length, 0);
});

test("fewer than five go when the 5-second timer fires", async () => {
  const b = browser();
  const s = sender("pk_x", b.transport, () => {});
  for (let i = 0; i < 4; i++) s.add(ev(i));
  await tick();
  assert.equal(b.posts.length, 0);
  assert.deepEqual(b.waits.map((w) => w.ms), [5000], "one timer for the batch");
  b.fire(5000); // no flush: the timer alone sends them
  await tick();
  assert.equal(b.posts.length, 1, "the timer sends the four");
  assert.equal(s.queue.length, 0);
});

test("seven synchronous events: five go at once, the other two with a timer of their own", async () => {
  const b = browser();
  const s = sender("pk_x", b.transport, () => {});
  for (let i = 0; i < 7; i++) s.add(ev(i));
  await tick();
  assert.equal(b.posts.length, 1);
  const armed = b.waits.filter((w) => w.ms === 5000);
  assert.ok(armed.length >= 1, "a timer is armed for the two that wait");
  b.fire(5000);
  await tick();
  assert.equal(b.posts.length, 2, "the two are not stranded");
  assert.deepEqual(ids(b.posts[1].body), ["id-5", "id-6"]);
  assert.equal(s.queue.length, 0);
});

test("the timer of the first event is disarmed by a send at five; the next event arms its own", async () => {
  const b = browser();
  const s = sender("pk_x", b.transport, () => {});
  s.add(ev(0)); // arms a timer
  for (let i = 1; i < 5; i++) s.add(ev(i)); // sent at once
  await tick();
  assert.equal(b.posts.length, 1, "the fifth event sends without any timer or flush");
  s.add(ev(5));
  assert.equal(b.waits.length, 2, "the next event arms a timer of its own");
  b.waits[0].go();
  await tick();
  assert.equal(b.posts.length, 1, "the first timer no longer sends");
  b.waits[1].go();
  await tick();
  assert.equal(b.posts.length, 2, "the new timer sends the sixth event");
  assert.deepEqual(ids(b.posts[1].body), ["id-5"]);
});

test("events queued while a batch is in flight go with a timer once it is answered", async () => {
  const b = browser([], true);
  const s = sender("pk_x", b.transport, () => {});
  for (let i = 0; i < 5; i++) s.add(ev(i));
  await tick();
  for (let i = 5; i < 8; i++) s.add(ev(i)); // during the request
  b.answer();
  await tick();
  assert.equal(b.posts.length, 1, "the three wait for a timer");
  assert.equal(s.queue.length, 3);
  b.fire(5000);
  await tick();
  assert.equal(b.posts.length, 2);
  b.answer();
  await tick();
  assert.deepEqual(ids(b.posts[1].body), ["id-5", "id-6", "id-7"]);
  assert.equal(s.queue.length, 0);
});

test("a request never holds more than five events", async () => {
  const b = browser();
  const s = sender("pk_x", b.transport, () => {});
  s.queue = Array.from({ length: 12 }, (_, i) => ev(i));
  await s.flush();
  assert.deepEqual(b.posts.map((p) => JSON.parse(p.body).events.length), [5, 5, 2]);
});

test("keepalive is decided on UTF-8 bytes: a 96 KB body of 48 K characters goes without it", async () => {
  const b = browser();
  const s = sender("pk_x", b.transport, () => {});
  for (let i = 0; i < 5; i++) s.add(ev(i, "é".repeat(9600))); // 19.2 KB of UTF-8 each
  await tick();
  assert.equal(b.posts.length, 1);
  const body = b.posts[0].body;
  assert.ok(body.length < BUDGET && utf8Length(body) > BUDGET, `${body.length} units, ${utf8Length(body)} bytes`);
  assert.equal(b.posts[0].keepalive, false, "over the budget: a plain request, which the browser sends");
  assert.equal(s.queue.length, 0, "sent, not failed and retried for ever");
});

test("408, 429, 5xx and network errors are retried with the same events; other 4xx dropped", async () => {
  const b = browser([503, 0, 429, 408, 202, 400]);
  const logs: string[] = [];
  const s = sender("pk_x", b.transport, (m) => logs.push(m));
  s.queue = Array.from({ length: 5 }, (_, i) => ev(i));
  const done = s.flush();
  for (let i = 0; i < 4; i++) {
    while (b.waits.filter((w) => w.ms !== FLUSH_BOUND_MS).length <= i) await tick();
    b.waits.filter((w) => w.ms !== FLUSH_BOUND_MS)[i].go();
  }
  await done;
  assert.equal(b.posts.length, 5);
  assert.ok(b.posts.every((p) => p.body.replace(/"sentAt":\d+/, "") === b.posts[0].body.replace(/"sentAt":\d+/, "")));
  s.queue = [ev(9)];
  await s.flush();
  assert.equal(s.queue.length, 0, "a 400 is not retried");
  assert.ok(logs.some((m) => m.startsWith("refused 400")));
});

test("after MAX_ATTEMPTS the sender rests: nothing is dropped, every event kept, and the next flush sends them", async () => {
  const b = browser(Array(MAX_ATTEMPTS).fill(503));
  const logs: string[] = [];
  const s = sender("pk_x", b.transport, (m) => logs.push(m));
  for (let i = 0; i < 6; i++) s.add(ev(i));
  const done = s.flush();
  for (let i = 0; i < MAX_ATTEMPTS - 1; i++) {
    while (b.waits.filter((w) => w.ms !== FLUSH_BOUND_MS && w.ms !== 5000).length <= i) await tick();
    b.waits.filter((w) => w.ms !== FLUSH_BOUND_MS && w.ms !== 5000)[i].go();
  }
  await done;
  assert.equal(b.posts.length, MAX_ATTEMPTS, "the first batch, tried MAX_ATTEMPTS times");
  assert.ok(logs.some((m) => m.startsWith("resting")), logs.join());
  assert.equal(s.queue.length, 6, "nothing dropped");
  assert.equal(b.kept.at(-1)!.length, 6, "every event kept for the next page view");
  s.add(ev(6));
  b.fire(5000);
  await tick();
  assert.equal(b.posts.length, MAX_ATTEMPTS, "resting: a new event sends nothing");
  assert.equal(b.kept.at(-1)!.length, 7);
  await s.flush(); // back online, or the page's own flush
  assert.deepEqual(b.posts.slice(MAX_ATTEMPTS).flatMap((p) => ids(p.body)), ["id-0", "id-1", "id-2", "id-3", "id-4", "id-5", "id-6"]);
  assert.equal(s.queue.length, 0);
  assert.deepEqual(b.kept.at(-1), [], "nothing left to keep");
});

test("the service's rejected events are logged", async () => {
  const b = browser([{ status: 202, retryAfter: null, rejected: [{ index: 1, error: "scrollDepth out of range" }] }]);
  const logs: [string, unknown][] = [];
  const s = sender("pk_x", b.transport, (m, d) => logs.push([m, d]));
  s.queue = [ev(0), ev(1)];
  await s.flush();
  assert.deepEqual(logs.find(([m]) => m.startsWith("rejected")), ["rejected: scrollDepth out of range", ev(1)]);
});

test("flush() settles within its bound while the service never answers", async () => {
  const b = browser([], true);
  const s = sender("pk_x", b.transport, () => {});
  s.add(ev(0));
  let settled = false;
  void s.flush().then(() => (settled = true));
  await tick();
  assert.equal(settled, false);
  b.fire(FLUSH_BOUND_MS);
  await tick();
  assert.equal(settled, true);
  assert.equal(s.queue.length, 1, "still queued for later");
});

test("the queue is bounded: the oldest event goes first, logged", () => {
  const b = browser();
  const logs: string[] = [];
  const s = sender("pk_x", b.transport, (m) => logs.push(m));
  s.held = true;
  for (let i = 0; i <= MAX_QUEUE; i++) s.add(ev(i));
  assert.equal(s.queue.length, MAX_QUEUE);
  assert.equal((s.queue[0] as { eventId: string }).eventId, "id-1");
  assert.ok(logs.includes("queue full"));
  assert.equal(b.posts.length + b.waits.length, 0, "held: nothing sent, no timer");
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

test("unload: beacons stay within the browser's 64 KiB; what does not fit is kept for the next view", () => {
  const b = browser();
  const s = sender("pk_x", b.transport, () => {});
  const big = "é".repeat(10000); // 20 KB of UTF-8 each
  s.queue = Array.from({ length: 4 }, (_, i) => ev(i, big));
  s.unload();
  const total = b.beacons.reduce((n, body) => n + utf8Length(body), 0);
  assert.ok(total <= BUDGET, `${total} bytes`);
  const sent = b.beacons.flatMap((body) => {
    const parsed = JSON.parse(body);
    assert.equal(parsed.pkey, "pk_x");
    return ids(body);
  });
  assert.deepEqual(sent, ["id-0", "id-1", "id-2"], "three of 20 KB fit");
  assert.deepEqual(b.kept.at(-1)!.map((e) => (e as { eventId: string }).eventId), ["id-3"]);
  assert.equal(s.queue.length, 1, "the kept event stays queued while the page lives");
});

test("unload counts the keepalive request in flight and does not send its events twice", async () => {
  const b = browser([], true);
  const s = sender("pk_x", b.transport, () => {});
  const big = "x".repeat(12000);
  for (let i = 0; i < 5; i++) s.add(ev(i, big)); // a keepalive request of 60 KB in flight
  await tick();
  assert.equal(b.posts[0].keepalive, true);
  s.add(ev(5, big));
  s.add(ev(6));
  s.unload();
  assert.deepEqual(b.beacons.flatMap(ids), ["id-6"], "only the small event fits beside the request");
  assert.deepEqual(b.kept.at(-1)!.map((e) => (e as { eventId: string }).eventId), ["id-5"]);
  b.answer();
  await tick();
  assert.deepEqual(s.queue.map((e) => (e as { eventId: string }).eventId), ["id-5"]);
});

test("a beacon the browser refuses keeps its events", () => {
  const b = browser();
  b.transport.beacon = () => false;
  const s = sender("pk_x", b.transport, () => {});
  s.queue = [ev(1)];
  s.unload();
  assert.equal(s.queue.length, 1);
  assert.equal(b.kept.at(-1)!.length, 1);
});

test("beacon bodies split under the limit, in order, within the budget", () => {
  const events = Array.from({ length: 10 }, (_, i) => ev(i, "x".repeat(9000)));
  const { bodies, rest } = beaconBodies("pk_x", events, 30000, 50000);
  assert.ok(bodies.every((b) => utf8Length(b.body) <= 30000));
  assert.ok(bodies.reduce((n, b) => n + utf8Length(b.body), 0) <= 50000);
  assert.deepEqual(bodies.flatMap((b) => b.events).concat(rest), events);
  const { rest: tooLarge } = beaconBodies("pk_x", [ev(1, "x".repeat(70000)), ev(2)], BUDGET);
  assert.deepEqual(tooLarge.map((e) => e.eventId), ["id-1"]);
});

test("an event whose JSON throws at send time: its batch is dropped, later ones go, nothing rejects", async () => {
  const escaped: unknown[] = [];
  const note = (e: unknown) => escaped.push(e);
  process.on("unhandledRejection", note);
  try {
    const b = browser();
    const lines: string[] = [];
    const s = sender<object>("pk_x", b.transport, (m) => lines.push(m));
    s.add({ eventId: "bad", toJSON: () => { throw new TypeError("no JSON"); } });
    for (let i = 0; i < 4; i++) s.add(ev(i)); // the fifth event sends the batch
    await tick();
    for (let i = 4; i < 9; i++) s.add(ev(i));
    await tick();
    await s.flush();
    await tick();
    assert.deepEqual(b.posts.flatMap((p) => ids(p.body)), ["id-4", "id-5", "id-6", "id-7", "id-8"]);
    assert.deepEqual(s.queue, []);
    assert.ok(lines.includes("unsendable"), lines.join());
  } finally {
    process.off("unhandledRejection", note);
  }
  assert.deepEqual(escaped, []);
});

// The event queue and its sending. Invariants: a timer is armed whenever events wait
// (none are stranded); a request holds at most 5 events; an event leaves the queue only
// once the service or the browser took it, or it was given up on (logged); the bodies
// sent with keepalive or as beacons never exceed the browser's shared 64 KiB budget
// (counting the keepalive bytes still in flight), and what does not fit at unload is kept
// for the next page view.

/**
 * JSON.stringify with a page's `toJSON` on Array.prototype or Object.prototype (Prototype
 * 1.6 turns every array into a string so) set aside while it runs.
 */
export function stringify(value: unknown): string {
  const saved = [Array, Object].map((c) => {
    const p = c.prototype as { toJSON?: unknown };
    const f = p.toJSON;
    if (f) delete p.toJSON;
    return () => f && (p.toJSON = f);
  });
  try {
    return JSON.stringify(value);
  } finally {
    saved.forEach((restore) => restore());
  }
}

/** Bytes of `text` as UTF-8. */
export function utf8Length(text: string): number {
  return new TextEncoder().encode(text).length;
}

/**
 * Splits `events` into page-unload bodies (`{"pkey":…,"sentAt":…,"events":[…]}`) of at
 * most `limit` bytes each, in order, for at most `budget` bytes in all. Returns the
 * bodies and the events left out (too large for the budget that remained), in order.
 */
export function beaconBodies<T>(
  pkey: string,
  events: T[],
  limit: number,
  budget = Infinity,
  sentAt = Date.now(),
): { bodies: { body: string; events: T[] }[]; rest: T[] } {
  const bodies: { body: string; events: T[] }[] = [];
  const rest: T[] = [];
  const head = utf8Length(stringify({ pkey, sentAt, events: [] }));
  let current: T[] = [];
  let size = head;
  const close = () => {
    if (current.length) {
      bodies.push({ body: stringify({ pkey, sentAt, events: current }), events: current });
      budget -= size;
    }
    current = [];
    size = head;
  };
  for (const event of events) {
    const length = utf8Length(stringify(event)) + 1; // and its comma
    if (size + length > limit) close();
    if (size + length > Math.min(limit, budget)) rest.push(event);
    else {
      current.push(event);
      size += length;
    }
  }
  close();
  return { bodies, rest };
}

/**
 * Milliseconds to wait before retry number `attempt` (1, 2, …): exponential from 1 s,
 * capped at 60 s, jittered between half and all of it (`random` in [0, 1)) so that
 * clients that failed together do not come back together; never less than the server's
 * `Retry-After` (seconds or an HTTP date), when it gave one.
 */
export function retryDelay(attempt: number, retryAfter: string | null | undefined, random: number, now: number): number {
  const ceiling = Math.min(60000, 1000 * 2 ** Math.max(0, attempt - 1));
  const jittered = Math.round(ceiling / 2 + (random * ceiling) / 2);
  const seconds = Number(retryAfter || 0);
  const floor = Math.min(isNaN(seconds) ? Date.parse(retryAfter!) - now : seconds * 1000, 3600000);
  return floor > jittered ? floor : jittered;
}

/** Whether a response status means "the same request may pass later" (0: no answer). */
export function retryable(status: number): boolean {
  return status === 0 || status === 408 || status === 429 || status >= 500;
}

export interface Answer {
  /** The HTTP status; 0 when no answer came (network error, refused keepalive). */
  status: number;
  retryAfter?: string | null;
  /** The service's `rejected` list: `index` into the batch and the reason. */
  rejected?: { index: number; error: string }[];
}

export interface Transport {
  /** POSTs a standard-form body, with `keepalive` when asked. */
  post(body: string, keepalive: boolean): Promise<Answer>;
  /** Queues a page-unload body with the browser; false when the browser refused it. */
  beacon(body: string): boolean;
  /** Resolves after `ms` milliseconds. */
  wait(ms: number): Promise<void>;
  /**
   * Keeps the events not yet sent for the next page view (replacing those this page kept
   * before): called at every change of the queue, so that a tab killed keeps them too.
   */
  keep(events: unknown[]): void;
}

export const BATCH_SIZE = 5;
export const FLUSH_MS = 5000;
/** The browser's budget for keepalive and beacon bodies in flight (Chromium, Firefox). */
export const BUDGET = 65536;
/** Events kept in memory at most; the oldest go first (logged). */
export const MAX_QUEUE = 500;
/**
 * Attempts of one batch before the sender rests (about 2 minutes): its events stay queued
 * and kept, and go at the next flush (the browser back online, the next page view).
 */
export const MAX_ATTEMPTS = 8;
/** Events kept for the next page view at most (the newest). */
export const MAX_KEPT = 100;
/** `flush()` settles within this, whatever the service does. */
export const FLUSH_BOUND_MS = 10000;

/** The queue and its sending (a closure, not a class: it minifies smaller). */
export interface Sender<E> {
  /** Events not yet taken by the service or the browser, oldest first. */
  queue: E[];
  /** Nothing is sent while held (consent pending); events only queue. */
  held: boolean;
  /** Queues an event: a full batch of 5 goes at once, fewer within 5 s. */
  add(event: E): void;
  /**
   * Sends everything queued (after a rest too); settles when the queue is empty, the
   * sender rests, or after 10 s.
   */
  flush(): Promise<void>;
  /**
   * Page unload: what is queued goes by beacon, within what the browser's budget has left
   * beside the keepalive request in flight (whose events are not sent twice). The rest
   * stays queued (sent if the page comes back) and is kept, the newest MAX_KEPT, for the
   * next page view: the service counts an eventId once, so a copy sent twice is harmless.
   */
  unload(): void;
}

export function sender<E>(
  pkey: string,
  transport: Transport,
  /** `dropped`: how many events this drops, for good. */
  log: (message: string, detail?: unknown, dropped?: number) => void,
): Sender<E> {
  /** The armed timer's token (0: none). */
  let timer = 0;
  let timers = 0;
  /** Events of the request under way (still queued until it is answered). */
  let flying: E[] = [];
  /** Bytes of keepalive requests in flight: they count against the browser's budget. */
  let keepalive = 0;
  let sending: Promise<void> | null = null;
  /** MAX_ATTEMPTS failed: nothing is sent until the next flush. */
  let resting = false;
  /** Ends the wait before a retry now (a flush: back online, the page's own). */
  let wake = () => {};
  const self: Sender<E> = { queue: [], held: false, add, flush, unload };
  /** Events not in a request now. */
  const waiting = () => self.queue.length - flying.length;

  /** The queue kept for the next page view as it is now. */
  const keep = () => transport.keep(self.queue.slice(-MAX_KEPT));

  function add(event: E): void {
    self.queue.push(event);
    if (self.queue.length > MAX_QUEUE) log("queue full", self.queue.shift(), 1);
    keep();
    if (self.held || resting) return;
    if (waiting() >= BATCH_SIZE) {
      timer = 0;
      void send(false);
    }
    arm();
  }

  /** Arms the 5-second timer when events wait and none is armed. */
  function arm(): void {
    if (timer || self.held || resting || !waiting()) return;
    const mine = (timer = ++timers);
    void transport.wait(FLUSH_MS).then(() => {
      if (timer !== mine) return;
      timer = 0;
      void send(true);
    });
  }

  function flush(): Promise<void> {
    if (self.held) return Promise.resolve();
    timer = 0;
    resting = false;
    wake();
    return Promise.race([send(true), transport.wait(FLUSH_BOUND_MS)]);
  }

  /** One request at a time: each send waits for the one before. */
  function send(all: boolean): Promise<void> {
    const next = (sending || Promise.resolve()).then(() => drain(all));
    sending = next;
    // then(f, f), not finally: old Promise polyfills have no finally.
    const done = () => {
      if (sending === next) sending = null;
    };
    void next.then(done, done);
    return next;
  }

  /** Sends full batches, or (`all`) everything; events queued meanwhile are included. */
  async function drain(all: boolean): Promise<void> {
    try {
      await batches(all);
    } catch (e) {
      // An event the service cannot take (its JSON throws): the batch is dropped, the rest
      // goes on, and nothing rejects into the page.
      log("unsendable", [e, flying], flying.length);
      self.queue = self.queue.filter((x) => !flying.includes(x));
      flying = [];
      keep();
      arm();
    }
  }

  async function batches(all: boolean): Promise<void> {
    let attempt = 0;
    while (!self.held && !resting && self.queue.length >= (all ? 1 : BATCH_SIZE)) {
      const batch = (flying = self.queue.slice(0, BATCH_SIZE));
      // sentAt: this client's clock now, so that the service corrects each event's
      // timestamp by the clock's offset (a retry gets its own).
      const body = stringify({ sentAt: Date.now(), events: batch });
      const bytes = utf8Length(body);
      // keepalive only within the budget that requests in flight leave.
      const alive = keepalive + bytes <= BUDGET;
      if (alive) keepalive += bytes;
      let answer: Answer;
      try {
        answer = await transport.post(body, alive);
      } catch {
        answer = { status: 0 };
      }
      if (alive) keepalive -= bytes;
      flying = [];
      const { status, retryAfter, rejected } = answer;
      if (!retryable(status)) {
        self.queue = self.queue.filter((e) => !batch.includes(e));
        attempt = 0;
        keep();
        log(status > 299 ? "refused " + status : "sent", batch, status > 299 ? batch.length : 0);
        for (const r of rejected || []) log("rejected: " + r.error, batch[r.index], 1);
        continue;
      }
      if (++attempt >= MAX_ATTEMPTS) {
        resting = true;
        return log("resting", batch);
      }
      const delay = retryDelay(attempt, retryAfter, Math.random(), Date.now());
      log("retry in " + delay, status);
      await new Promise<void>((go) => {
        wake = go;
        void transport.wait(delay).then(go);
      });
    }
  }

  function unload(): void {
    if (self.held) return;
    const inFlight = keepalive ? flying : [];
    const { bodies, rest } = beaconBodies(
      pkey,
      self.queue.filter((e) => !inFlight.includes(e)),
      BUDGET,
      BUDGET - keepalive,
    );
    for (const { body, events } of bodies)
      if (transport.beacon(body)) log("beacon", events);
      else rest.push(...events);
    self.queue = inFlight.concat(rest);
    transport.keep(rest.slice(-MAX_KEPT));
  }

  return self;
}

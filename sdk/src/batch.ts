// The event queue and its sending: batches of at most 5 through the standard form,
// retried with backoff; the rest through the page-unload beacon, split under 60 KB.

/** Bytes of `text` as UTF-8. */
export function utf8Length(text: string): number {
  return new TextEncoder().encode(text).length;
}

/**
 * Splits `events` into page-unload bodies (`{"pkey":…,"sentAt":…,"events":[…]}`) of at
 * most `limit` bytes each, in order. An event too large for any body on its own is left
 * out (the service would refuse it as well): it is returned apart.
 */
export function beaconBodies<T>(
  pkey: string,
  events: T[],
  limit: number,
  sentAt = Date.now(),
): { bodies: { body: string; events: T[] }[]; tooLarge: T[] } {
  const bodies: { body: string; events: T[] }[] = [];
  const tooLarge: T[] = [];
  const head = utf8Length(JSON.stringify({ pkey, sentAt, events: [] }));
  let current: T[] = [];
  let size = head;
  const close = () => {
    if (current.length) bodies.push({ body: JSON.stringify({ pkey, sentAt, events: current }), events: current });
    current = [];
    size = head;
  };
  for (const event of events) {
    const length = utf8Length(JSON.stringify(event)) + 1; // and its comma
    if (head + length > limit) {
      tooLarge.push(event);
      continue;
    }
    if (size + length > limit) close();
    current.push(event);
    size += length;
  }
  close();
  return { bodies, tooLarge };
}

/**
 * Milliseconds to wait before retry number `attempt` (1, 2, …): exponential from 1 s,
 * capped at 60 s, jittered between half and all of it (`random` in [0, 1)) so that
 * clients that failed together do not come back together; never less than the server's
 * `Retry-After` (seconds or an HTTP date), when it gave one.
 */
export function retryDelay(
  attempt: number,
  retryAfter: string | null,
  random: number,
  now: number,
): number {
  const ceiling = Math.min(60000, 1000 * 2 ** Math.max(0, attempt - 1));
  const jittered = Math.round(ceiling / 2 + (random * ceiling) / 2);
  let floor = 0;
  if (retryAfter) {
    const seconds = Number(retryAfter);
    floor = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(retryAfter) - now;
    if (!(floor > 0)) floor = 0;
    floor = Math.min(floor, 3600000);
  }
  return Math.max(jittered, floor);
}

/** Whether a response status means "the same request may pass later". */
export function retryable(status: number): boolean {
  return status === 429 || status >= 500;
}

export interface Transport {
  /** POSTs a standard-form body; a network failure is status 0. */
  post(body: string): Promise<{ status: number; retryAfter: string | null }>;
  /** Queues a page-unload body with the browser; false when the browser refused it. */
  beacon(body: string): boolean;
  /** Resolves after `ms` milliseconds. */
  wait(ms: number): Promise<void>;
  /** Resolves once the browser is online. */
  online(): Promise<void>;
}

export const BATCH_SIZE = 5;
export const FLUSH_MS = 5000;
export const BEACON_LIMIT = 60000;

/** The in-memory queue. Events leave it only once the service or the browser took them. */
export class Sender<E> {
  queue: E[] = [];
  /** The armed timer's number (0: none); a send disarms it. */
  private timer = 0;
  private timers = 0;
  /** Events of the request under way (still queued until it is answered). */
  private flying = 0;
  private sending: Promise<void> | null = null;

  constructor(
    private pkey: string,
    private transport: Transport,
    private log: (message: string, detail?: unknown) => void,
  ) {}

  /** Queues an event: a full batch of 5 goes at once, fewer 5 s after the first. */
  add(event: E): void {
    this.queue.push(event);
    if (this.queue.length - this.flying >= BATCH_SIZE) {
      this.timer = 0;
      void this.send(false);
    } else if (!this.timer) {
      const timer = (this.timer = ++this.timers);
      void this.transport.wait(FLUSH_MS).then(() => {
        if (this.timer === timer) void this.flush();
      });
    }
  }

  /** Sends everything queued, 5 at a time, retrying what may pass later. */
  flush(): Promise<void> {
    this.timer = 0;
    return this.send(true);
  }

  /** One request at a time: each send waits for the one before. */
  private send(all: boolean): Promise<void> {
    const next = (this.sending || Promise.resolve()).then(() => this.drain(all));
    this.sending = next;
    void next.finally(() => {
      if (this.sending === next) this.sending = null;
    });
    return next;
  }

  /** Sends full batches, or (`all`) everything; events queued meanwhile are included. */
  private async drain(all: boolean): Promise<void> {
    let attempt = 0;
    while (this.queue.length >= (all ? 1 : BATCH_SIZE)) {
      const batch = this.queue.slice(0, BATCH_SIZE);
      this.flying = batch.length;
      // sentAt: this client's clock now, so that the service corrects each event's
      // timestamp by the clock's offset (a retry gets its own).
      const body = JSON.stringify({ sentAt: Date.now(), events: batch });
      const { status, retryAfter } = await this.transport.post(body);
      this.flying = 0;
      if (!retryable(status) && status !== 0) {
        this.queue = this.queue.filter((e) => !batch.includes(e));
        attempt = 0;
        if (status >= 400) this.log(`batch dropped: the service answered ${status}`, batch);
        else this.log(`sent ${batch.length} events`, batch);
        continue;
      }
      attempt++;
      const delay = retryDelay(attempt, retryAfter, Math.random(), Date.now());
      this.log(`send failed (${status || "network error"}); retry ${attempt} in ${delay} ms`);
      await this.transport.wait(delay);
      await this.transport.online();
    }
  }

  /** Page unload: everything queued goes by beacon, in bodies under 60 KB. */
  unload(): void {
    const { bodies } = beaconBodies(this.pkey, this.queue, BEACON_LIMIT);
    for (const { body, events } of bodies) {
      if (!this.transport.beacon(body)) {
        this.log("the browser refused a beacon; events kept");
        return;
      }
      this.queue = this.queue.filter((e) => !events.includes(e));
      this.log(`beacon with ${events.length} events`, events);
    }
  }
}

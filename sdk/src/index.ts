// The browser client of the split-testing service: fetches the experiments once, assigns
// variants (deterministic, weighted, sticky), shows the variant's text parts without
// flicker, and sends analytics events in batches, with the page-unload beacon last.
// Nothing here throws into the host page: every entry point catches and logs.

import { assign, type Experiment, type Variant } from "./assign";
import { Sender } from "./batch";

export interface Options {
  /** The service's base URL, e.g. `https://split.example.com`. */
  baseUrl: string;
  /** The site's public key, `pk_…`. */
  publicKey: string;
  /** Only these experiments (sent as `X-experiment-ids`). */
  experimentIds?: string[];
  /** Logs each batch and every problem to the console. */
  debug?: boolean;
}

/** The contract's optional event fields (`conversion`, `loadTime`, `clickTarget`, …). */
export type Fields = Record<string, string | number | boolean | undefined>;

type Event = Record<string, string | number | boolean | undefined>;

const SESSION_IDLE_MS = 30 * 60 * 1000;
const FAILSAFE_MS = 800;
const UTM = ["utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content"];
const HIDE = "[data-split-experiment] [data-split-part]:not([data-split-applied]){visibility:hidden!important}";

let options: Options | undefined;
let experiments: Record<string, Experiment> = {};
let sender: Sender<Event> | undefined;
let testMode = false;
let landingUtm: Record<string, string> = {};
const impressions: Record<string, boolean> = {};
const memory: Record<string, string> = {};
let hider: HTMLStyleElement | undefined;

function log(message: string, detail?: unknown): void {
  if (options?.debug) console.log("[split] " + message, detail ?? "");
}

/** Runs `body`, turning any exception into a log line and `fallback`. */
function guard<T>(body: () => T, fallback: T): T {
  try {
    return body();
  } catch (e) {
    log("error", e);
    return fallback;
  }
}

// Storage: localStorage when the browser allows it, else this page's memory.
function load(key: string): string | null {
  const stored = guard(() => localStorage.getItem(key), null);
  return stored ?? memory[key] ?? null;
}

function save(key: string, value: string): void {
  memory[key] = value;
  guard(() => localStorage.setItem(key, value), undefined);
}

function loadJson<T>(key: string): T | undefined {
  return guard(() => JSON.parse(load(key) || "null") ?? undefined, undefined);
}

function uuid(): string {
  const c = globalThis.crypto;
  if (c?.randomUUID) return c.randomUUID();
  const b = new Uint8Array(16);
  if (c?.getRandomValues) c.getRandomValues(b);
  else for (let i = 0; i < 16; i++) b[i] = (Math.random() * 256) | 0;
  b[6] = (b[6] & 15) | 64;
  b[8] = (b[8] & 63) | 128;
  const h = Array.from(b, (x) => (x + 256).toString(16).slice(1)).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** A random id per browser, kept in localStorage: the unit of assignment. */
function visitorId(): string {
  let id = load("split_vid");
  if (!id) save("split_vid", (id = uuid()));
  return id;
}

interface Session {
  id: string;
  last: number;
  utm: Record<string, string>;
}

/** The session, renewed after 30 idle minutes; UTM tags of its landing page kept. */
function session(): Session {
  const now = Date.now();
  let s = loadJson<Session>("split_session");
  if (!s || !(now - s.last < SESSION_IDLE_MS)) s = { id: uuid(), last: now, utm: landingUtm };
  else if (Object.keys(landingUtm).length) s.utm = landingUtm;
  s.last = now;
  save("split_session", JSON.stringify(s));
  return s;
}

function variantOf(experimentId: string): Variant | null {
  const experiment = experiments[experimentId];
  if (!experiment) return null;
  const seen = loadJson<Record<string, string>>("split_seen") || {};
  const variant = assign(experiment, visitorId(), seen);
  save("split_seen", JSON.stringify(seen));
  return variant;
}

function impression(experimentId: string, variant: Variant): void {
  if (impressions[experimentId]) return;
  impressions[experimentId] = true;
  track("impression", experimentId, { variantId: variant.id });
}

/** Puts each assigned variant's parts into the page, as text. */
function apply(): void {
  document.querySelectorAll<HTMLElement>("[data-split-experiment]").forEach((root) => {
    const id = root.getAttribute("data-split-experiment") || "";
    const variant = variantOf(id);
    if (!variant) return;
    root.querySelectorAll<HTMLElement>("[data-split-part]").forEach((el) => {
      const text = variant.parts?.[el.getAttribute("data-split-part") || ""];
      if (typeof text === "string") el.textContent = text;
      el.setAttribute("data-split-applied", "");
    });
    impression(id, variant);
  });
}

function reveal(): void {
  hider?.remove();
  hider = undefined;
}

function use(document_: { experiments?: Experiment[] } | undefined): void {
  experiments = {};
  for (const e of document_?.experiments || []) experiments[e.id] = e;
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", apply);
  else apply();
}

/**
 * Fetches the experiments (once) and applies them. Resolves when done, or failed: it
 * never rejects. The last answer is kept, so the next page view applies at once.
 */
export function init(opts: Options): Promise<void> {
  return guard(() => start(opts).catch((e) => log("init failed", e)), Promise.resolve());
}

async function start(opts: Options): Promise<void> {
  {
    if (options) return log("init called twice; ignored");
    options = { ...opts, baseUrl: String(opts.baseUrl).replace(/\/+$/, "") };
    const base = options.baseUrl;
    const pkey = options.publicKey;
    testMode = guard(() => localStorage.getItem("service_test") === "true", false);
    landingUtm = {};
    const query = new URLSearchParams(location.search);
    for (const name of UTM) {
      const value = query.get(name);
      if (value) landingUtm[name] = value;
    }
    sender = new Sender<Event>(pkey, {
      post: (body) =>
        fetch(base + "/api/v1/analytics", {
          method: "POST",
          headers: { "X-public-key": pkey, "Content-Type": "application/json", Accept: "application/json" },
          body,
          keepalive: body.length < 60000,
        }).then(
          (r) => ({ status: r.status, retryAfter: r.headers.get("Retry-After") }),
          () => ({ status: 0, retryAfter: null }),
        ),
      beacon: (body) => guard(() => navigator.sendBeacon(base + "/api/v1/analytics", body), false),
      wait: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
      online: () =>
        navigator.onLine === false
          ? new Promise((resolve) => addEventListener("online", () => resolve(), { once: true }))
          : Promise.resolve(),
    }, log);
    const unload = () => guard(() => sender?.unload(), undefined);
    addEventListener("pagehide", unload);
    document.addEventListener("visibilitychange", () => document.visibilityState === "hidden" && unload());

    // Only the parts wait for their text, and not for long.
    hider = document.createElement("style");
    hider.textContent = HIDE;
    document.head.appendChild(hider);
    setTimeout(reveal, FAILSAFE_MS);

    const ids = options.experimentIds || [];
    const cacheKey = `split_cache:${pkey}:${ids.join(",")}:${testMode}`;
    const cached = loadJson<{ experiments?: Experiment[] }>(cacheKey);
    if (cached) use(cached);
    const headers: Record<string, string> = { "X-public-key": pkey, Accept: "application/json" };
    if (ids.length) headers["X-experiment-ids"] = ids.join(",");
    if (testMode) headers["X-service-test"] = "true";
    try {
      const response = await fetch(base + "/api/v1/experiments", { headers });
      if (response.ok) {
        const text = await response.text();
        use(JSON.parse(text));
        save(cacheKey, text);
        log("experiments", experiments);
      } else log(`experiments not fetched: the service answered ${response.status}`);
    } catch (e) {
      log("experiments not fetched", e);
    }
    reveal();
  }
}

/** The visitor's variant id for an experiment (counts an impression once), or null. */
export function variant(experimentId: string): string | null {
  return guard(() => {
    const v = variantOf(experimentId);
    if (v) impression(experimentId, v);
    return v ? v.id : null;
  }, null);
}

/** Queues an event of the experiment; `fields` are the contract's optional fields. */
export function track(eventName: string, experimentId: string, fields?: Fields): void {
  guard(() => {
    if (!sender) return log("track before init; ignored");
    if (!eventName || !experimentId || typeof eventName + typeof experimentId !== "stringstring")
      return log("track needs an event name and an experiment id; ignored");
    const s = session();
    const event: Event = {
      variantId: variantOf(experimentId)?.id,
      pathname: location.pathname,
      referrer: document.referrer,
      ...s.utm,
      ...(typeof fields === "object" ? fields : {}),
      eventName,
      experimentId,
      sessionId: s.id,
      eventId: uuid(),
      timestamp: Date.now(),
    };
    if (testMode) event.test = true;
    sender.add(event);
  }, undefined);
}

/** Queues a `conversion` event with `conversion: true`. */
export function convert(experimentId: string, fields?: Fields): void {
  track("conversion", experimentId, { ...fields, conversion: true });
}

/** Sends what is queued now; resolves when the queue is empty (or given up). */
export function flush(): Promise<void> {
  return guard(() => (sender?.flush() ?? Promise.resolve()).catch((e) => log("flush", e)), Promise.resolve());
}

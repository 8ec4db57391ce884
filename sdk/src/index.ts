// The browser client of the split-testing service: fetches the experiments on init (a
// stored answer, up to maxStale past its lifetime, applies at once; a fresh one from the
// next view), assigns variants (deterministic, weighted, sticky within a phase; events in
// the phase of the assignment), shows the variant's text parts without flicker or late
// swap (element styles: no <style> for a strict CSP), follows SPA route changes and
// consent, and sends analytics events in batches.
// Nothing here throws into the host page: every entry point catches and logs.

import { assign, phaseOf, prior, type Seen } from "./assign";
import { sender as newSender, stringify, type Answer, type Sender } from "./batch";

export type Consent = "granted" | "pending" | "denied";

/** A variant as the service serves it (`/api/v1/experiments`). */
export interface Variant {
  id: string;
  weight: number;
  control?: boolean;
  parts?: Record<string, string>;
}

/** An experiment as the service serves it. */
export interface Experiment {
  id: string;
  variants: Variant[];
  /** The experiment's phase (1 when the service does not say): a new phase re-randomizes. */
  phase?: number;
}

export interface Options {
  /** The service's base URL, e.g. `https://split.example.com`. */
  baseUrl: string;
  /** The site's public key, `pk_…`. */
  publicKey: string;
  /** Only these experiments (sent as `X-experiment-ids`). */
  experimentIds?: string[];
  /** Logs each batch and every problem to the console. */
  debug?: boolean;
  /**
   * `granted` (default): stores ids, sends events. `pending`: reads stored ids and
   * assignments but writes nothing, events queued; a decision remembered from an earlier
   * page (`setConsent`) applies instead. `denied`: nothing stored or sent.
   */
  consent?: Consent;
  /**
   * The site's own id of the visitor (a first-party server cookie, a login): assignment
   * and events use it instead of a random one. A different id than before is a new
   * visitor (fresh assignments and session).
   */
  visitorId?: string;
  /**
   * Also keeps the visitor id in a first-party cookie `split_vid` on this domain
   * (`example.com`: shared by `www.` and `shop.`), with consent. A `split_vid` cookie is
   * read whether or not this is set (a site's server may set it).
   */
  cookieDomain?: string;
  /**
   * Seconds past its lifetime that a stored answer is still applied at once, while a fresh
   * one is fetched (default 86400, a day); the fresh one applies from the next view.
   */
  maxStale?: number;
  /**
   * A server-rendered page's experiments (the `experiments` of `/api/v1/experiments`)
   * and, optionally, its assignments (experiment id to variant id): applied at once,
   * nothing fetched.
   */
  bootstrap?: { experiments: Experiment[]; assignments?: Record<string, string> };
  /**
   * Called with each error the SDK caught (it never throws into the page), and with an
   * Error `split: N events dropped …` when events are lost for good.
   */
  onError?: (error: unknown) => void;
}

/** What a visitor got in one experiment. */
export interface Assignment {
  experimentId: string;
  variantId: string;
  /** The phase the assignment was made in. */
  phase: number;
  /** Forced with `?split_force=` (its events are marked `test`). */
  forced: boolean;
  /** Shown (an impression logged) on this page view. */
  shown: boolean;
}

/** The contract's optional event fields (`conversion`, `loadTime`, `clickTarget`, …). */
export type Fields = Record<string, string | number | boolean | undefined>;

/**
 * An event as sent: the contract's fields (docs/openapi.yaml's `Event`, checked against the
 * service's list of them by its tests), and whatever else a caller's `fields` hold (the
 * service ignores fields it does not know).
 */
interface Event {
  eventName: string;
  experimentId: string;
  sessionId: string;
  variantId?: string;
  visitorId?: string;
  eventId?: string;
  timestamp?: number;
  phase?: number;
  conversion?: boolean;
  loadTime?: number;
  scrollDepth?: number;
  timeOnPage?: number;
  clickTarget?: string;
  pathname?: string;
  referrer?: string;
  utm_source?: string;
  utm_medium?: string;
  utm_campaign?: string;
  utm_term?: string;
  utm_content?: string;
  test?: boolean;
  [field: string]: string | number | boolean | undefined;
}

const SESSION_IDLE_MS = 30 * 60 * 1000;
const FAILSAFE_MS = 800;
const MAX_HELD = 100;
const UTM = ["utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content"];
const ROOT = "[data-split-experiment]";
const PART = "[data-split-part]";
const APPLIED = "data-split-applied";
const DAY_S = 86400;
const KEYS = ["split_vid", "split_session", "split_seen"];
/** This page's key of its kept events (`split_kept:…`); the next page view sends them. */
const KEPT = "split_kept";
const mine = KEPT + ":" + Math.random();

let options: Options | undefined;
/** The experiments this page view uses; undefined until the answer (or the cache) came. */
let experiments: Record<string, Experiment> | undefined;
/** The failsafe passed before any answer, or consent was denied: originals stay. */
let off = false;
/** Consent was denied on this page: originals for the rest of it, whatever answer comes. */
let withdrawn = false;
/** An answer that came after the view was decided (from the stored one, or the failsafe): the next view's. */
let late: Experiment[] | undefined;
let consent: Consent = "granted";
let sender: Sender<Event> | undefined;
let testMode = false;
let landingUtm: Record<string, string> = {};
let forced: Record<string, string> = {};
/** This view's impressions, by experiment. */
let shown: Record<string, Assignment & { variant: Variant }> = {};
/** Events tracked before the answer: they get their variant once it is known. */
let held: Event[] = [];
let path = "";
/** The visitor id this page made up (none was stored): a stored one found later wins. */
let random: string | undefined;
/** The site's visitor id (`visitorId`, `identify`). */
let siteId: string | undefined;
const memory: Record<string, string> = {};
const originals = new Map<Element, string | null>();
/**
 * Parts hidden until their text is known, with their own inline visibility. Element styles
 * set from script, not a <style>: a strict CSP (`style-src 'self'`) allows them.
 */
const hidden = new Map<HTMLElement, string>();

/** Logs (`debug`); events lost for good (`dropped`) go to `onError` too. */
function log(message: string, detail?: unknown, dropped?: number): void {
  if (options?.debug) console.log("[split] " + message, detail ?? "");
  if (dropped) report(new Error(`split: ${dropped} events dropped: ${message}`));
}

function report(error: unknown): void {
  try {
    options?.onError?.(error);
  } catch {
    // the page's hook threw: nothing more to do
  }
}

/** Runs `body`, turning any exception into a log line, `onError` and `fallback`. */
function guard<T>(body: () => T, fallback?: T): T {
  try {
    return body();
  } catch (e) {
    log("error", e);
    report(e);
    return fallback as T;
  }
}

// Storage: localStorage when the browser allows it, and this page's memory. Granted: both
// written, storage read first. Pending: storage read (under this page's changes), never
// written. Denied: memory only.
function load(key: string): string | null {
  const stored = consent !== "denied" ? guard(() => localStorage.getItem(key), null) : null;
  return (consent === "granted" ? stored ?? memory[key] : memory[key] ?? stored) ?? null;
}

function save(key: string, value: string): void {
  memory[key] = value;
  if (consent === "granted") guard(() => localStorage.setItem(key, value));
}

/** A stored object (or array); anything else (unreadable, another shape) is none. */
function loadJson<T>(key: string): T | undefined {
  return guard(() => {
    const value = JSON.parse(load(key) || "null");
    return typeof value === "object" ? value ?? undefined : undefined;
  });
}

/**
 * A random UUID v4 (RFC 9562): 122 random bits, from crypto.getRandomValues (http pages
 * have it too, not crypto.randomUUID): one byte per hex digit of the template's 31 free
 * ones, of which the digit keeps 4 bits (2 for the variant's).
 */
function uuid(): string {
  const b = crypto.getRandomValues(new Uint8Array(31));
  let i = 0;
  return "10000000-1000-4000-8000-100000000000".replace(/[018]/g, (c) =>
    ((+c ^ (b[i++] & (15 >> (+c / 4)))) >>> 0).toString(16),
  );
}

/** The `split_vid` cookie (set by the SDK on `cookieDomain`, or by the site's server). */
function cookieId(): string | undefined {
  return guard(() => {
    const m = consent !== "denied" && /(?:^|; )split_vid=([^;]+)/.exec(document.cookie);
    return m ? decodeURIComponent(m[1]) : undefined;
  });
}

/**
 * The unit of assignment: the site's id (`visitorId`, `identify`), else the `split_vid`
 * cookie, else the stored one, else a new random one. Another id than the stored one
 * keeps the assignments made on this browser and the session (a login keeps the variant).
 */
function visitorId(): string {
  const was = load("split_vid");
  const id = siteId || cookieId() || was || (random = uuid());
  if (id !== was) save("split_vid", id);
  return id;
}

/** This page's events so far are visitor `to`'s, not `from`'s (another tab's id won). */
function rename(from: string, to: string): void {
  for (const e of held.concat(sender?.queue || [])) if (e.visitorId === from) e.visitorId = to;
}

/** With consent and `cookieDomain`: the visitor id in a cookie there too (400 days). */
function persist(): void {
  const domain = options?.cookieDomain;
  if (domain && consent === "granted")
    guard(
      () =>
        (document.cookie = `split_vid=${encodeURIComponent(visitorId())};domain=${domain};path=/;max-age=34560000;samesite=lax${
          location.protocol === "https:" ? ";secure" : ""
        }`),
    );
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
  save("split_session", stringify(s));
  return s;
}

/**
 * The visitor's assignment in a served experiment, or null. Shown (`now`): the one of the
 * phase live now (made if need be). Otherwise the stored one, in the phase it was made in:
 * an event counts in the phase of the visitor's assignment, even once a new phase began
 * (none stored: made now).
 */
function assignment(experimentId: string, now?: boolean): (Assignment & { variant: Variant }) | null {
  const experiment = experiments?.[experimentId];
  if (off || !experiment) return null;
  let phase = phaseOf(experiment);
  const force = experiment.variants.find((v) => v.id === forced[experimentId]);
  let variant: Variant | null | undefined = force;
  if (!variant) {
    const vid = visitorId();
    const seen = loadJson<Seen>("split_seen") || {};
    const was = prior(seen, experimentId);
    if (was && !now) {
      phase = was[1];
      variant = experiment.variants.find((v) => v.id === was[0]) || { id: was[0], weight: 0 };
    } else {
      variant = assign(experiment, vid, seen);
      save("split_seen", stringify(seen));
    }
  }
  return (
    variant && {
      experimentId,
      variantId: variant.id,
      phase,
      forced: !!force,
      shown: !!shown[experimentId],
      variant,
    }
  );
}

/** The assignment, with its impression logged once per view. */
function expose(experimentId: string): Variant | null {
  // What this view shows stays its answer, whatever another tab stored since.
  const a = shown[experimentId] || assignment(experimentId, true);
  if (a && !shown[experimentId]) {
    shown[experimentId] = { ...a, shown: true };
    track("impression", experimentId, { variantId: a.variantId });
  }
  return a ? a.variant : null;
}

/** Puts the assigned variant's parts into one experiment root, as text. */
function applyRoot(root: Element): void {
  const variant = expose(root.getAttribute("data-split-experiment") || "");
  root.querySelectorAll(PART).forEach((el) => {
    const text = variant?.parts?.[el.getAttribute("data-split-part") || ""];
    if (typeof text === "string" && el.textContent !== text) {
      if (!originals.has(el)) originals.set(el, el.textContent);
      el.textContent = text;
    }
    el.setAttribute(APPLIED, "");
    show(el as HTMLElement);
  });
}

/** Hides a root's parts that wait for their text (until the answer or the failsafe). */
function hide(root: Element): void {
  root.querySelectorAll<HTMLElement>(PART).forEach((el) => {
    if (!hidden.has(el) && !el.hasAttribute(APPLIED)) {
      hidden.set(el, el.style.visibility);
      el.style.setProperty("visibility", "hidden", "important");
    }
  });
}

function show(el: HTMLElement): void {
  if (hidden.has(el)) el.style.visibility = hidden.get(el)!;
  hidden.delete(el);
}

/** Applies every root on the page; tells listeners (the auto-capture) of the view. */
function applyAll(): void {
  if (experiments) document.querySelectorAll(ROOT).forEach(applyRoot);
  dispatchEvent(new CustomEvent("split:view")); // not Event: MooTools replaces it
}

/** Applies the roots that nodes added to the page belong to or hold (while parsing, SPA renders). */
function observe(records: MutationRecord[]): void {
  if (off) return;
  const roots = new Set<Element>();
  for (const r of records)
    r.addedNodes.forEach((node) => {
      const el = node.nodeType === 1 ? (node as Element) : node.parentElement;
      const root = el?.closest(ROOT);
      if (root) roots.add(root);
      if (el && node.nodeType === 1) el.querySelectorAll(ROOT).forEach((r) => roots.add(r));
    });
  roots.forEach(experiments ? applyRoot : hide);
}

function reveal(): void {
  hidden.forEach((_, el) => show(el));
}

function use(list: Experiment[]): void {
  experiments = {};
  for (const e of list || []) experiments[e.id] = e;
}

/**
 * The answer is known (or given up on): apply it and release the held events. One that
 * comes once the view was decided (by the stored answer, or the failsafe) is the next
 * view's: no late swap.
 */
function decide(list: Experiment[]): void {
  if (experiments || off) return void (late = list);
  use(list);
  applyAll();
  reveal();
  release();
}

function release(): void {
  const events = held;
  held = [];
  events.forEach(send);
}

/**
 * Events that page views kept (closed, killed, offline, or given a rest), each of a day at
 * most (older: dropped, counted), queued here once. Pending: read, left stored (removed
 * once granted) so that no decision loses them.
 */
function adopt(): void {
  const now = Date.now();
  guard(() =>
    Object.keys(localStorage).forEach((key) => {
      if (!key.startsWith(KEPT) || key === mine) return;
      const events = loadJson<Event[]>(key);
      if (consent === "granted") localStorage.removeItem(key);
      if (!Array.isArray(events)) return;
      const fresh = events.filter((e) => now - (e.timestamp as number) < DAY_S * 1000);
      log("expired", key, events.length - fresh.length);
      for (const e of fresh) if (!sender!.queue.some((q) => q.eventId === e.eventId)) sender!.add(e);
    }),
  );
}

/**
 * Fills in what the answer tells (variant, phase, test for a forced variant) and queues.
 * The variant is the one this view showed, if it showed one: another tab may have stored
 * another since.
 */
function send(event: Event): void {
  const a = assignment(event.experimentId as string);
  if (a) {
    event.variantId ??= shown[event.experimentId]?.variantId ?? a.variantId;
    event.phase = a.phase;
    if (a.forced) event.test = true;
  }
  sender?.add(event);
}

/** A new view (SPA route change, `refresh()`): impressions counted afresh, parts applied. */
function view(now: boolean): void {
  path = location.pathname;
  shown = {};
  if (late && !withdrawn) {
    use(late);
    off = false;
    late = undefined;
  }
  if (now) applyAll();
  else setTimeout(() => guard(applyAll)); // once the router has rendered the view
}

/**
 * Fetches the experiments and applies them (a cached answer within its lifetime at once).
 * Resolves when done, or failed: it never rejects.
 */
export function init(opts: Options): Promise<void> {
  return guard(() => start(opts).catch((e) => log("init failed", e)), Promise.resolve());
}

async function start(opts: Options): Promise<void> {
  if (options) return log("init twice");
  options = { ...opts, baseUrl: String(opts.baseUrl).replace(/\/+$/, "") };
  const base = options.baseUrl;
  const pkey = options.publicKey;
  // A pending page takes the decision an earlier page remembered.
  const remembered = guard(() => localStorage.getItem("split_consent"), null) as Consent | null;
  consent = opts.consent === "pending" ? remembered || "pending" : opts.consent || "granted";
  testMode = guard(() => localStorage.getItem("service_test") === "true", false);
  const query = new URLSearchParams(location.search);
  for (const name of UTM) {
    const value = query.get(name);
    if (value) landingUtm[name] = value;
  }
  // QA: ?split_force=exp_a:var_b,exp_c:var_d, kept for the tab (sessionStorage).
  forced = guard(() => JSON.parse(sessionStorage.getItem("split_force") || "{}"), {});
  const force = query.get("split_force");
  if (force != null) {
    for (const pair of force.split(",")) {
      const [e, v] = pair.split(":");
      if (e && v) forced[e] = v;
    }
    guard(() => sessionStorage.setItem("split_force", stringify(forced)));
  }
  sender = newSender<Event>(
    pkey,
    {
      post: (body, keepalive) =>
        fetch(base + "/api/v1/analytics", {
          method: "POST",
          headers: { "X-public-key": pkey, "Content-Type": "application/json", Accept: "application/json" },
          body,
          keepalive,
        }).then(
          async (r): Promise<Answer> => ({
            status: r.status,
            retryAfter: r.headers.get("Retry-After"),
            rejected: await r.json().then((b) => b.rejected, () => undefined),
          }),
        ),
      beacon: (body) => guard(() => navigator.sendBeacon(base + "/api/v1/analytics", body), false),
      wait: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
      keep: (events) => (events.length ? save(mine, stringify(events)) : guard(() => localStorage.removeItem(mine))),
    },
    log,
  );
  sender.held = consent !== "granted";
  // split:unload first: listeners (the auto-capture) queue their last events synchronously.
  const unload = () => {
    guard(() => dispatchEvent(new CustomEvent("split:unload")));
    guard(() => sender?.unload());
  };
  addEventListener("pagehide", unload);
  document.addEventListener("visibilitychange", () => document.visibilityState === "hidden" && unload());
  if (consent === "denied") return setConsent("denied");
  if (opts.visitorId) siteId = String(opts.visitorId);
  persist();
  adopt();
  // Back online: what waited goes now.
  addEventListener("online", () => void flush());
  // Two new tabs at once: each made up an id, the one stored last is the visitor.
  addEventListener(
    "storage",
    (e) =>
      e.key === "split_vid" &&
      random &&
      e.newValue &&
      e.newValue === load("split_vid") &&
      rename(random, (random = e.newValue)),
  );

  // SPA: a route change is a new view.
  path = location.pathname;
  const route = () => guard(() => location.pathname !== path && view(false));
  for (const m of ["pushState", "replaceState"] as const) {
    const original = history[m];
    guard(() => {
      history[m] = function (this: History, ...args: Parameters<History["pushState"]>) {
        const result = original.apply(this, args);
        route();
        return result;
      };
    }); // a read-only history: route changes by popstate only
  }
  addEventListener("popstate", route);
  new MutationObserver((r) => guard(() => observe(r))).observe(document.documentElement, {
    childList: true,
    subtree: true,
  });

  // Only the parts wait for their text, and not for long: after the failsafe the view
  // keeps its original text, whatever comes later (a later view uses it).
  document.querySelectorAll(ROOT).forEach(hide);
  setTimeout(() => {
    if (!experiments) {
      off = true;
      log("failsafe");
      release();
    }
    reveal();
  }, FAILSAFE_MS);

  const ids = options.experimentIds || [];
  const cacheKey = `split_cache:${pkey}:${ids.join(",")}`;
  // A returning visitor sees their variant at once: the stored answer applies within its
  // lifetime and maxStale past it; the fresh one, fetched meanwhile, from the next view.
  const boot = opts.bootstrap;
  if (boot) {
    // The server rendered these variants: they are the visitor's.
    const seen = loadJson<Seen>("split_seen") || {};
    for (const x of boot.experiments) {
      const v = boot.assignments?.[x.id];
      if (v) seen[x.id] = [v, phaseOf(x)];
    }
    save("split_seen", stringify(seen));
    return decide(boot.experiments);
  }
  const cached = testMode ? undefined : loadJson<{ t: number; a: number; e: Experiment[] }>(cacheKey);
  if (cached?.e?.map && Date.now() - cached.t < (cached.a + (options.maxStale ?? DAY_S)) * 1000) decide(cached.e);
  const headers: Record<string, string> = { "X-public-key": pkey, Accept: "application/json" };
  if (ids.length) headers["X-experiment-ids"] = ids.join(",");
  if (testMode) headers["X-service-test"] = "true";
  try {
    // The browser's HTTP cache revalidates by ETag after Cache-Control's max-age.
    const response = await fetch(base + "/api/v1/experiments", { headers });
    if (!response.ok) throw response.status;
    const list = (await response.json()).experiments;
    const age = /max-age=(\d+)/.exec(response.headers.get("Cache-Control") || "");
    if (!testMode && age) save(cacheKey, stringify({ t: Date.now(), a: +age[1], e: list }));
    log("experiments", list);
    decide(list);
  } catch (e) {
    log("no experiments", e);
    if (!experiments && !off) decide([]);
  }
}

/** The visitor's variant id for an experiment (counts an impression once per view), or null. */
export function variant(experimentId: string): string | null {
  return guard(() => expose(experimentId)?.id ?? null, null);
}

/** Queues an event of the experiment; `fields` are the contract's optional fields. */
export function track(eventName: string, experimentId: string, fields?: Fields): void {
  guard(() => {
    if (!sender || consent === "denied") return log("track: off");
    if (!eventName || !experimentId || typeof eventName + typeof experimentId !== "stringstring")
      return log("track: bad");
    const s = session();
    const event: Event = {
      pathname: location.pathname,
      referrer: document.referrer,
      ...s.utm,
      ...(typeof fields === "object" ? fields : {}),
      eventName,
      experimentId,
      sessionId: s.id,
      visitorId: visitorId(),
      eventId: uuid(),
      timestamp: Date.now(),
    };
    if (testMode) event.test = true;
    try {
      stringify(event);
    } catch (e) {
      return log("track: unserializable", e);
    }
    if (experiments || off) send(event);
    else if (held.length < MAX_HELD) held.push(event);
    else log("held full", event, 1);
  });
}

/** Queues a `conversion` event with `conversion: true`. */
export function convert(experimentId: string, fields?: Fields): void {
  track("conversion", experimentId, { ...fields, conversion: true });
}

/** Sends what is queued now; settles when sent, given up on, or within 10 s. */
export function flush(): Promise<void> {
  return guard(() => (sender?.flush() ?? Promise.resolve()).catch((e) => log("flush", e)), Promise.resolve());
}

/** A new view for routers that change the page without the history API. */
export function refresh(): void {
  guard(() => view(true));
}

/** The visitor's assignments in the served experiments (none made here). */
export function assignments(): Assignment[] {
  return guard(() => {
    const seen = loadJson<Seen>("split_seen") || {};
    return Object.keys(experiments || {})
      .filter((id) => shown[id] || seen[id] || forced[id])
      .map((id) => assignment(id))
      .filter((a): a is Assignment & { variant: Variant } => !!a)
      .map(({ variant: _, ...a }) => a);
  }, []);
}

/**
 * The site's own id of the visitor from now on (after a login, say); assignment and events
 * use it. The assignments made on this browser stay (the visitor keeps the variant they
 * saw); impressions are counted afresh on this view, under the new id.
 */
export function identify(id: string): void {
  guard(() => {
    if (!id || typeof id !== "string") return log("identify: bad");
    const was = load("split_vid");
    siteId = id;
    visitorId();
    persist();
    if (was !== id && experiments) view(true);
  });
}

/**
 * Consent, remembered (`split_consent` in localStorage) for later pages that init as
 * `pending`. `granted`: ids stored (what is stored already is kept, never replaced),
 * events sent (what waited too). `pending`: stored ids read, nothing written, events
 * queued, nothing sent. `denied`: everything of the SDK's removed from storage but the
 * decision, nothing stored or sent, queued events dropped, the page's original text back
 * for the rest of this page load.
 */
export function setConsent(state: Consent): void {
  guard(() => {
    consent = state;
    if (state === "granted") {
      const stored = guard(() => localStorage.getItem("split_vid"));
      // Another page stored a visitor while this one waited: it stays the visitor, and
      // this page's events so far are theirs.
      if (random && stored && stored !== random) {
        for (const key of KEYS) delete memory[key];
        rename(random, stored);
      } else for (const key of KEYS) if (key in memory) save(key, memory[key]);
      random = undefined;
      persist();
      if (sender) {
        adopt(); // the kept events, read while pending, now removed from storage
        sender.held = false;
        sender.flush();
      }
    } else if (sender) {
      sender.held = true;
      if (state === "denied") {
        off = withdrawn = true;
        sender.queue = held = [];
        shown = {};
        originals.forEach((text, el) => (el.textContent = text));
        reveal();
      }
    }
    if (state === "denied") {
      guard(() => Object.keys(localStorage).forEach((k) => k.startsWith("split_") && localStorage.removeItem(k)));
      for (const domain of ["", ";domain=" + options?.cookieDomain])
        guard(() => (document.cookie = "split_vid=;path=/;max-age=0" + domain));
    }
    if (state !== "pending") guard(() => localStorage.setItem("split_consent", state));
  });
}

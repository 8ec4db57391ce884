// A fake browser page for unit tests of the built scripts (dist/split.min.js and
// dist/split-autotrack.min.js): each page is a fresh `vm` context with the globals the SDK
// uses; a `Browser` keeps what outlives a page (localStorage, cookies) across page views.
// The service is faked: `/api/v1/experiments` answers `experiments`, analytics bodies are
// recorded in `posts` and `beacons`. Timers are unref'd, so pending ones never hold the
// test process.
import { readFileSync } from "node:fs";
import vm from "node:vm";
import { webcrypto } from "node:crypto";

/** localStorage's shape: data as own properties (Object.keys works), methods on the prototype. */
export class Store {
  getItem(key: string): string | null {
    return Object.prototype.hasOwnProperty.call(this, key) ? (this as unknown as Record<string, string>)[key] : null;
  }
  setItem(key: string, value: string): void {
    (this as unknown as Record<string, string>)[key] = String(value);
  }
  removeItem(key: string): void {
    delete (this as unknown as Record<string, string>)[key];
  }
}

export interface Cookie {
  value: string;
  domain?: string;
}

/** What outlives a page view: localStorage and cookies (name → value and its domain). */
export class Browser {
  local = new Store();
  cookies = new Map<string, Cookie>();
  /** What localStorage holds of the SDK's (keys starting with `split_`), sorted. */
  stored(): string[] {
    return Object.keys(this.local)
      .filter((k) => k.startsWith("split_"))
      .sort();
  }
}

export interface PageOptions {
  /** The experiments the service answers. */
  experiments?: unknown[];
  path?: string;
  hostname?: string;
  /** Hides crypto.randomUUID (an http page). */
  noRandomUUID?: boolean;
  /** The page's own setup before the scripts run (a hostile page). */
  setup?: (window: Record<string, any>) => void;
  /** Attributes of the auto-capture's script tag. */
  autotrackAttributes?: Record<string, string>;
  /** Milliseconds the service takes to answer the experiments. */
  answerDelay?: number;
  /** The answer's `Cache-Control: max-age` in seconds (none: the SDK does not store it). */
  maxAge?: number;
}

export const EXPERIMENTS = [
  {
    id: "exp_a",
    variants: [
      { id: "var_a", weight: 50 },
      { id: "var_b", weight: 50 },
    ],
  },
];

export interface Page {
  window: Record<string, any>;
  Split: Record<string, any>;
  /** Each analytics body POSTed, parsed. */
  posts: { events: Record<string, any>[] }[];
  beacons: { events: Record<string, any>[] }[];
  /** Every event sent (POSTed or by beacon). */
  events(): Record<string, any>[];
  /** The SDK's debug lines. */
  logs: string[];
  /** Errors that escaped to the page (uncaught from a listener or timer). */
  errors: unknown[];
  /** Runs the auto-capture script in this page. */
  autotrack(): void;
  /** The page goes away: pagehide. */
  leave(): void;
}

const core = () => readFileSync("dist/split.min.js", "utf8");
const autotrackCode = () => readFileSync("dist/split-autotrack.min.js", "utf8");

export function page(browser: Browser, opts: PageOptions = {}): Page {
  const posts: Page["posts"] = [];
  const beacons: Page["beacons"] = [];
  const logs: string[] = [];
  const errors: unknown[] = [];
  const target = new EventTarget();
  const docTarget = new EventTarget();
  const hostname = opts.hostname || "www.example.com";
  const crypto = opts.noRandomUUID
    ? { getRandomValues: <T extends ArrayBufferView>(a: T) => webcrypto.getRandomValues(a as any) as T }
    : webcrypto;
  let currentScript: { getAttribute(name: string): string | null } | null = null;
  const element = () => ({ textContent: "", remove() {}, setAttribute() {}, style: {} });
  const document = {
    readyState: "complete",
    referrer: "",
    visibilityState: "visible",
    get currentScript() {
      return currentScript;
    },
    get cookie() {
      return [...browser.cookies].map(([k, c]) => `${k}=${c.value}`).join("; ");
    },
    set cookie(text: string) {
      const [pair, ...attrs] = text.split(/;\s*/);
      const eq = pair.indexOf("=");
      const name = pair.slice(0, eq);
      const value = pair.slice(eq + 1);
      const attr = (n: string) => attrs.find((a) => a.toLowerCase().startsWith(n + "="))?.split("=")[1];
      const domain = attr("domain")?.replace(/^\./, "");
      if (domain && !(hostname === domain || hostname.endsWith("." + domain))) return; // refused
      const maxAge = attr("max-age");
      const expires = attr("expires");
      if ((maxAge != null && +maxAge <= 0) || (expires && Date.parse(expires) < Date.now())) browser.cookies.delete(name);
      else browser.cookies.set(name, { value, domain });
    },
    head: { appendChild() {} },
    documentElement: {},
    createElement: element,
    querySelectorAll: () => [],
    addEventListener: docTarget.addEventListener.bind(docTarget),
    dispatchEvent: docTarget.dispatchEvent.bind(docTarget),
  };
  const json = (body: unknown, headers: Record<string, string> = {}) => ({
    ok: true,
    status: 200,
    headers: { get: (name: string) => headers[name] ?? null },
    json: async () => body,
  });
  const fetch = async (url: string, init: { body?: string } = {}) => {
    if (url.endsWith("/api/v1/experiments")) {
      if (opts.answerDelay) await new Promise((r) => setTimeout(r, opts.answerDelay));
      const cache: Record<string, string> = opts.maxAge == null ? {} : { "Cache-Control": `max-age=${opts.maxAge}` };
      return json({ experiments: opts.experiments ?? EXPERIMENTS }, cache);
    }
    posts.push(JSON.parse(init.body!));
    return { ...json({}), status: 202 };
  };
  const w: Record<string, any> = {
    console: { log: (...a: unknown[]) => logs.push(a.map(String).join(" ")) },
    document,
    location: { pathname: opts.path || "/", search: "", hostname, protocol: "https:" },
    history: { pushState() {}, replaceState() {} },
    navigator: {
      sendBeacon: (_url: string, body: string) => (beacons.push(JSON.parse(body)), true),
    },
    localStorage: browser.local,
    sessionStorage: new Store(),
    crypto,
    fetch,
    MutationObserver: class {
      observe() {}
    },
    Event,
    CustomEvent,
    URLSearchParams,
    TextEncoder,
    performance: { now: () => performance.now(), getEntriesByType: () => [] },
    setTimeout: (f: () => void, ms?: number) =>
      setTimeout(() => {
        try {
          f();
        } catch (e) {
          errors.push(e);
        }
      }, ms).unref(),
    addEventListener: target.addEventListener.bind(target),
    removeEventListener: target.removeEventListener.bind(target),
    dispatchEvent: target.dispatchEvent.bind(target),
  };
  w.window = w;
  vm.createContext(w);
  opts.setup?.(w);
  vm.runInContext(core(), w);
  return {
    window: w,
    Split: w.Split,
    posts,
    beacons,
    events: () => [...posts, ...beacons].flatMap((b) => b.events),
    logs,
    errors,
    autotrack() {
      const attrs = opts.autotrackAttributes || {};
      currentScript = { getAttribute: (n) => attrs[n] ?? null };
      try {
        vm.runInContext(autotrackCode(), w);
      } finally {
        currentScript = null;
      }
    },
    leave() {
      w.dispatchEvent(new Event("pagehide"));
    },
  };
}

/** Lets the page's promises and zero-delay timers run. */
export async function settle(ms = 20): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
}

export const INIT = { baseUrl: "https://split.example.com", publicKey: "pk_test", debug: true };

// Opt-in auto-capture (split-autotrack.min.js), loaded after split.min.js: it only calls
// the core's API (window.SplitTesting). Goal clicks and conversions go to the experiment
// of the root they sit in, else to every experiment the visitor is in; the page's
// measures (scroll_depth, dwell_time, bounce, performance) go once per page load, at the
// first hide or unload, to the experiments shown on it; window errors at most 5 a page.
// Options are the script tag's data attributes: data-conversion-url (a regular
// expression matched against location.pathname, checked at each view the core announces).

import type { Assignment, Fields } from "./index";

interface Core {
  track(name: string, experimentId: string, fields?: Fields): void;
  assignments(): Assignment[];
}

const MAX_ERRORS = 5;
const w = window as unknown as { SplitTesting?: Core };
const source = document.currentScript?.getAttribute("data-conversion-url");
let rule: RegExp | undefined;
try {
  if (source) rule = new RegExp(source);
} catch {
  // an invalid rule: no URL conversions, the rest works
}
const started = performance.now();
let scrolled = 0;
let active = false;
let errors = 0;
let done = false;
let converted = "";
let views = 0;

/** Sends `name` to `experimentId`'s experiment, or to every (shown: on this page) one; how many. */
function send(name: string, fields: Fields, experimentId?: string | null, onlyShown?: boolean): number {
  try {
    const core = w.SplitTesting;
    if (!core) return 0;
    const ids = experimentId
      ? [experimentId]
      : core
          .assignments()
          .filter((a) => a.shown || !onlyShown)
          .map((a) => a.experimentId);
    for (const id of ids) core.track(name, id, fields);
    return ids.length;
  } catch {
    return 0; // never in the page's way
  }
}

const experimentOf = (el: Element) => el.closest("[data-split-experiment]")?.getAttribute("data-split-experiment");

addEventListener(
  "click",
  (e) => {
    active = true;
    const target = e.target instanceof Element ? e.target : null;
    const goal = target?.closest("[data-split-goal]");
    if (goal) send("click", { clickTarget: goal.getAttribute("data-split-goal") || "" }, experimentOf(goal));
    const conversion = target?.closest("[data-split-conversion]");
    if (conversion)
      send(
        "conversion",
        { conversion: true, clickTarget: conversion.getAttribute("data-split-conversion") || "" },
        experimentOf(conversion),
      );
  },
  true,
);
addEventListener("keydown", () => (active = true), true);
addEventListener(
  "scroll",
  () => {
    const d = document.documentElement;
    const depth = d.scrollHeight > innerHeight ? ((scrollY + innerHeight) / d.scrollHeight) * 100 : 100;
    scrolled = Math.max(scrolled, Math.min(100, Math.round(depth)));
    if (scrolled > 0) active = true;
  },
  { passive: true },
);
addEventListener("error", (e) => {
  if (errors++ < MAX_ERRORS) send("error", { clickTarget: String(e.message).slice(0, 200) }, null, true);
});

/** The URL rule: one conversion per matching path (once the visitor's assignments are known). */
function checkUrl(): void {
  const path = location.pathname;
  if (rule && path !== converted && rule.test(path) && send("conversion", { conversion: true, clickTarget: "url" }))
    converted = path;
}
checkUrl(); // the core may have applied a cached answer before this script loaded
// The core announces each view (its answer, a route change) once it has applied it.
addEventListener("split:view", () => {
  if (views++) active = true; // a route change is an interaction
  checkUrl();
});

/** The page's measures, once: the core announces its unload (hide or pagehide) before it sends. */
function measures(): void {
  if (done) return;
  done = true;
  const nav = performance.getEntriesByType("navigation")[0] as PerformanceNavigationTiming | undefined;
  if (nav && nav.loadEventEnd > 0) send("performance", { loadTime: Math.round(nav.loadEventEnd) }, null, true);
  send("scroll_depth", { scrollDepth: scrolled }, null, true);
  send("dwell_time", { timeOnPage: Math.round(performance.now() - started) }, null, true);
  if (!active) send("bounce", {}, null, true);
}
addEventListener("split:unload", measures);

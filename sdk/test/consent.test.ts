// Consent, on the built script over several page views of one browser:
// pending reads what is stored and writes nothing; granting keeps what is stored; the
// decision is remembered for the next page's init; denied keeps memory only; events held
// for the next page (split_kept) are not deleted unread.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Browser, INIT, page, settle } from "./page";

const PENDING = { ...INIT, consent: "pending" };
/** A copy of everything localStorage holds. */
const snapshot = (b: Browser) => JSON.stringify(Object.entries(b.local).sort());

test("the consent-manager flow over 6 views: one visitor, one variant, every view's events", async () => {
  const b = new Browser();
  const visitors = new Set<string>();
  const variants = new Set<string>();
  for (let view = 1; view <= 6; view++) {
    const p = page(b, { path: `/view-${view}` });
    await p.Split.init(PENDING);
    variants.add(p.Split.variant("exp_a"));
    p.Split.track("click", "exp_a", { clickTarget: `#view-${view}` });
    if (view === 1) {
      await p.Split.flush();
      assert.deepEqual(p.posts, [], "nothing sent while pending");
      assert.deepEqual(b.stored(), [], "nothing stored while pending");
    }
    await settle(5);
    p.Split.setConsent("granted"); // the banner's answer, on every view
    await p.Split.flush();
    const events = p.events();
    assert.deepEqual(events.map((e) => e.eventName).sort(), ["click", "impression"], `view ${view}`);
    for (const e of events) visitors.add(e.visitorId);
    if (view === 1) assert.deepEqual(b.stored(), ["split_consent", "split_seen", "split_session", "split_vid"]);
  }
  assert.equal(visitors.size, 1, [...visitors].join());
  assert.equal(variants.size, 1, [...variants].join());
  assert.deepEqual([...visitors], [b.local.getItem("split_vid")]);
});

test("the decision is remembered: a later pending page knows it at init", async () => {
  const b = new Browser();
  const first = page(b);
  await first.Split.init(PENDING);
  first.Split.variant("exp_a");
  first.Split.setConsent("granted");
  const vid = b.local.getItem("split_vid");
  const later = page(b);
  await later.Split.init(PENDING); // no setConsent on this page
  later.Split.variant("exp_a");
  await later.Split.flush();
  assert.deepEqual(later.events().map((e) => [e.eventName, e.visitorId]), [["impression", vid]]);
});

test("pending reads the stored ids and assignments and writes nothing", async () => {
  const b = new Browser();
  const first = page(b);
  await first.Split.init(INIT); // granted by default: stored
  const variant = first.Split.variant("exp_a");
  const vid = b.local.getItem("split_vid");
  const before = snapshot(b);
  const p = page(b);
  await p.Split.init(PENDING);
  assert.equal(p.Split.variant("exp_a"), variant);
  p.Split.track("click", "exp_a");
  p.window.dispatchEvent(new Event("pagehide"));
  assert.equal(snapshot(b), before, "storage untouched while pending");
  p.Split.setConsent("granted");
  await p.Split.flush();
  assert.deepEqual(new Set(p.events().map((e) => e.visitorId)), new Set([vid]));
  assert.equal(b.local.getItem("split_vid"), vid);
});

test("granting never replaces a visitor another page stored meanwhile", async () => {
  const b = new Browser();
  const p = page(b);
  await p.Split.init(PENDING);
  p.Split.variant("exp_a"); // a visitor made up in memory
  b.local.setItem("split_vid", "11111111-1111-4111-8111-111111111111"); // another tab granted
  p.Split.setConsent("granted");
  assert.equal(b.local.getItem("split_vid"), "11111111-1111-4111-8111-111111111111");
  p.Split.track("click", "exp_a");
  await p.Split.flush();
  const click = p.events().find((e) => e.eventName === "click");
  assert.equal(click?.visitorId, "11111111-1111-4111-8111-111111111111");
});

test("denied removes what is stored, keeps memory only, and is remembered", async () => {
  const b = new Browser();
  const first = page(b);
  await first.Split.init(INIT);
  first.Split.variant("exp_a");
  first.Split.setConsent("denied");
  assert.deepEqual(b.stored(), ["split_consent"]);
  assert.equal(b.local.getItem("split_consent"), "denied");
  const later = page(b);
  await later.Split.init(PENDING);
  assert.equal(later.Split.variant("exp_a"), null);
  later.Split.track("click", "exp_a");
  await later.Split.flush();
  later.leave();
  assert.deepEqual(later.events(), []);
  assert.deepEqual(b.stored(), ["split_consent"]);
});

test("events kept for the next page are not deleted unread while pending; sent once granted", async () => {
  const b = new Browser();
  const kept = [{ eventName: "click", experimentId: "exp_a", eventId: "kept-1", visitorId: "v", timestamp: Date.now() }];
  b.local.setItem("split_kept", JSON.stringify(kept));
  const p = page(b);
  await p.Split.init(PENDING);
  await p.Split.flush();
  assert.equal(b.local.getItem("split_kept"), JSON.stringify(kept), "still stored while pending");
  p.Split.setConsent("granted");
  await p.Split.flush();
  assert.deepEqual(p.events().map((e) => e.eventId), ["kept-1"]);
  assert.equal(b.local.getItem("split_kept"), null);
});

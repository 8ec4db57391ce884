// Identity, on the built script: the site's own visitor id
// (`init({visitorId})`, `identify`), and the `split_vid` cookie on `cookieDomain` that
// subdomains share (or that the site's server sets).
import { test } from "node:test";
import assert from "node:assert/strict";
import { pick } from "../src/assign";
import type { Experiment } from "../src/index";
import { Browser, EXPERIMENTS, INIT, page } from "./page";

const EXP = EXPERIMENTS[0] as Experiment;
/** Two site ids that the experiment puts in different variants. */
const [ID_A, ID_B] = (() => {
  const a = "site-user-0";
  for (let i = 1; ; i++) if (pick(EXP, "site-user-" + i)?.id !== pick(EXP, a)?.id) return [a, "site-user-" + i];
})();

test("init({visitorId}): assignment and events use the site's id", async () => {
  const b = new Browser();
  const p = page(b);
  await p.Split.init({ ...INIT, visitorId: ID_A });
  assert.equal(p.Split.variant("exp_a"), pick(EXP, ID_A)?.id);
  p.Split.track("click", "exp_a");
  await p.Split.flush();
  assert.deepEqual(new Set(p.events().map((e) => e.visitorId)), new Set([ID_A]));
  assert.equal(b.local.getItem("split_vid"), ID_A);
});

test("identify(id) after a login: the new id from then on, the variant already seen kept, impression afresh", async () => {
  const b = new Browser();
  const p = page(b);
  await p.Split.init({ ...INIT, visitorId: ID_A });
  const seen = pick(EXP, ID_A)?.id;
  assert.notEqual(seen, pick(EXP, ID_B)?.id, "the two ids fall in different variants");
  assert.equal(p.Split.variant("exp_a"), seen);
  p.Split.identify(ID_B);
  assert.equal(p.Split.variant("exp_a"), seen, "the variant the visitor saw, not the new id's");
  await p.Split.flush();
  assert.deepEqual(
    p.events().map((e) => [e.eventName, e.visitorId, e.variantId]),
    [
      ["impression", ID_A, seen],
      ["impression", ID_B, seen],
    ],
  );
  // The next page without the site's id still knows the visitor, and their variant.
  const next = page(b);
  await next.Split.init(INIT);
  assert.equal(next.Split.variant("exp_a"), seen);
  assert.equal(b.local.getItem("split_vid"), ID_B);
});

test("the site's id while consent is pending: used, not stored until granted", async () => {
  const b = new Browser();
  const p = page(b);
  await p.Split.init({ ...INIT, consent: "pending", visitorId: ID_A });
  p.Split.variant("exp_a");
  assert.deepEqual(b.stored(), []);
  p.Split.setConsent("granted");
  await p.Split.flush();
  assert.equal(b.local.getItem("split_vid"), ID_A);
  assert.deepEqual(p.events().map((e) => e.visitorId), [ID_A]);
});

test("cookieDomain: www. and shop. are one visitor; without it, two", async () => {
  for (const cookieDomain of ["example.com", undefined]) {
    const www = new Browser();
    const shop = new Browser(); // its own localStorage (another origin), the same cookies
    shop.cookies = www.cookies;
    const vids: string[] = [];
    for (const [b, hostname] of [[www, "www.example.com"], [shop, "shop.example.com"]] as const) {
      const p = page(b, { hostname });
      await p.Split.init({ ...INIT, cookieDomain });
      p.Split.variant("exp_a");
      await p.Split.flush();
      vids.push(p.events()[0].visitorId);
    }
    if (cookieDomain) {
      assert.equal(vids[0], vids[1], "one visitor");
      assert.deepEqual(www.cookies.get("split_vid"), { value: vids[0], domain: "example.com" });
    } else {
      assert.notEqual(vids[0], vids[1], "two visitors");
      assert.equal(www.cookies.size, 0, "no cookie without cookieDomain");
    }
  }
});

test("a split_vid cookie set by the site's server is the visitor; denied removes the SDK's cookie", async () => {
  const b = new Browser();
  b.cookies.set("split_vid", { value: ID_B });
  const p = page(b);
  await p.Split.init(INIT);
  assert.equal(p.Split.variant("exp_a"), pick(EXP, ID_B)?.id);
  const q = page(new Browser(), { hostname: "www.example.com" });
  await q.Split.init({ ...INIT, cookieDomain: "example.com" });
  q.Split.variant("exp_a");
  q.Split.setConsent("denied");
  assert.equal(q.window.document.cookie, "");
});

test("no cookie while consent is pending; written once granted", async () => {
  const b = new Browser();
  const p = page(b);
  await p.Split.init({ ...INIT, consent: "pending", cookieDomain: "example.com" });
  p.Split.variant("exp_a");
  assert.equal(b.cookies.size, 0);
  p.Split.setConsent("granted");
  assert.equal(b.cookies.get("split_vid")?.value, b.local.getItem("split_vid"));
});

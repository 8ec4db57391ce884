// The script tag's entry (split.min.js): the API at window.Split, unless that name is
// taken by something else (the Split.js layout library); always at window.SplitTesting
// too. Calls queued by the two-line snippet before the script loaded are replayed.

import { assignments, convert, flush, identify, init, refresh, setConsent, track, variant } from "./index";
import type { Options } from "./index";

const api = { init, variant, track, convert, flush, refresh, assignments, setConsent, identify };
type Queued = { q?: [keyof typeof api, unknown[]][] };
const w = window as unknown as Record<string, (Queued & Record<string, unknown>) | undefined>;
const ours = (x: (Queued & Record<string, unknown>) | undefined) => !x || Array.isArray(x.q) || x._split;
const Split = { ...api, _split: 1 };
const queued = [w.Split, w.SplitTesting].filter((x) => x?.q);
if (ours(w.Split)) w.Split = Split;
w.SplitTesting = Split;
for (const stub of queued)
  for (const [method, args] of stub!.q!)
    try {
      (Split[method] as (...a: unknown[]) => unknown)(...args);
    } catch {
      // a queued call with a wrong method name: nothing to replay
    }
// No inline script (a CSP of script-src 'self'): the tag's data attributes start it, e.g.
// data-base-url, data-public-key, data-consent, data-experiment-ids="a,b".
const data = (document.currentScript as HTMLScriptElement | null)?.dataset;
if (data?.publicKey) init({ ...data, experimentIds: data.experimentIds?.split(",") } as unknown as Options);

// An ES-module consumer of the package, type-checked by package.test.ts (Node16
// resolution, through `exports`): the import condition's types.
import { init, track, type Consent, type Options } from "@split/sdk";

const consent: Consent = "pending";
const options: Options = { baseUrl: "https://split.example.com", publicKey: "pk_x", consent, maxStale: 3600 };
void init(options).then(() => track("click", "exp_a", { clickTarget: "#buy" }));
// @ts-expect-error: typed, not `any`
track(42, "exp_a");

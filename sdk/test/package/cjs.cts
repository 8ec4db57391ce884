// A CommonJS consumer of the package, type-checked by package.test.ts (Node16
// resolution, through `exports`): the require condition's types.
import split = require("@split/sdk");

const options: split.Options = { baseUrl: "https://split.example.com", publicKey: "pk_x", cookieDomain: "example.com" };
void split.init(options).then(() => split.convert("exp_a"));
// @ts-expect-error: typed, not `any`
split.setConsent("maybe");

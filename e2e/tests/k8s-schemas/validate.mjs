// Validates custom resources against their CRDs' schemas: one JSON document per line on
// stdin; prints each failure and exits 1 if any failed, 2 for a kind it has no schema of.
//
// Two sources of schemas:
// - kubernetes-models' npm packages (the Gateway API, prometheus-operator), compiled from
//   those projects' CRDs;
// - the CRDs kept in crds/ (Strimzi, Altinity; crds/README.md says where each comes from),
//   whose openAPIV3Schema is checked here as the API server would check it, strictly: a
//   field the schema does not declare is an error (the API server would prune it, and the
//   operator would never see it), unless the schema says
//   `x-kubernetes-preserve-unknown-fields`. CEL rules (`x-kubernetes-validations`) are not
//   evaluated: `node validate.mjs --cel-rules` lists them.
import { readdirSync, readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import Ajv from "ajv";
import { HTTPRoute } from "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const models = {
  "gateway.networking.k8s.io/v1 HTTPRoute": HTTPRoute,
  "monitoring.coreos.com/v1 PrometheusRule": PrometheusRule,
  "monitoring.coreos.com/v1 ServiceMonitor": ServiceMonitor,
};

const K8S_KEYWORDS = [
  "x-kubernetes-preserve-unknown-fields",
  "x-kubernetes-int-or-string",
  "x-kubernetes-embedded-resource",
  "x-kubernetes-validations",
  "x-kubernetes-list-type",
  "x-kubernetes-list-map-keys",
  "x-kubernetes-map-type",
  "nullable",
];

/// A structural schema as JSON Schema, with the API server's semantics made explicit.
/// `structural`: the node is on the schema's structural path (properties, items,
/// additionalProperties), not inside allOf/anyOf/oneOf/not, whose `properties` only
/// constrain values and declare no field.
function strict(node, structural, cel, path) {
  if (Array.isArray(node)) return node.map((n) => strict(n, structural, cel, path));
  if (node === null || typeof node !== "object") return node;
  const out = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === "properties") {
      out.properties = Object.fromEntries(
        Object.entries(value).map(([k, v]) => [k, strict(v, structural, cel, `${path}.${k}`)]),
      );
    } else if (key === "items" || key === "additionalProperties") {
      out[key] = strict(value, structural, cel, `${path}[]`);
    } else if (["allOf", "anyOf", "oneOf", "not"].includes(key)) {
      out[key] = strict(value, false, cel, path);
    } else if (key === "description" || key === "example" || key === "default") {
      // kept out: defaults are applied by the API server, not checked.
    } else if (key === "x-kubernetes-validations") {
      for (const rule of value) cel.push(`${path}: ${rule.rule}`);
    } else if (!K8S_KEYWORDS.includes(key)) {
      out[key] = value;
    }
  }
  if (node["x-kubernetes-int-or-string"]) {
    delete out.type;
    out.anyOf = [...(out.anyOf ?? []), { type: "integer" }, { type: "string" }];
  }
  if (node.nullable && out.type) {
    out.type = [out.type, "null"];
  }
  const object = node.type === "object" || node.properties !== undefined;
  if (
    structural &&
    object &&
    node.additionalProperties === undefined &&
    !node["x-kubernetes-preserve-unknown-fields"]
  ) {
    if (node["x-kubernetes-embedded-resource"]) {
      out.properties = {
        apiVersion: { type: "string" },
        kind: { type: "string" },
        metadata: { type: "object" },
        ...(out.properties ?? {}),
      };
    }
    out.additionalProperties = false;
  }
  return out;
}

const ajv = new Ajv({ allErrors: true, strict: false, validateFormats: false });
const crds = {};
const cel = [];
const dir = new URL("./crds/", import.meta.url);
for (const file of readdirSync(dir).filter((f) => f.endsWith(".json")).sort()) {
  const crd = JSON.parse(readFileSync(new URL(file, dir), "utf8"));
  for (const version of crd.spec.versions.filter((v) => v.served)) {
    const name = `${crd.spec.group}/${version.name} ${crd.spec.names.kind}`;
    const schema = strict(version.schema.openAPIV3Schema, true, cel, crd.spec.names.kind);
    // ObjectMeta is the API server's, whatever the CRD says of it.
    schema.properties.metadata = { type: "object" };
    schema.required = [...new Set([...(schema.required ?? []), "apiVersion", "kind", "metadata"])];
    // Compiled when first needed (the Kafka CRD takes seconds).
    let compiled;
    crds[name] = (doc) => {
      compiled ??= ajv.compile(schema);
      const valid = compiled(doc);
      crds[name].errors = compiled.errors;
      return valid;
    };
  }
}
if (process.argv.includes("--cel-rules")) {
  for (const rule of cel) console.log(`not evaluated: ${rule}`);
  process.exit(0);
}

/// The failures of one document: an empty list when it is valid.
function failures(doc) {
  const name = `${doc.apiVersion} ${doc.kind}`;
  if (models[name]) {
    try {
      new models[name](doc).validate();
      return [];
    } catch (e) {
      return [e.message];
    }
  }
  const validate = crds[name];
  if (validate(doc)) return [];
  return validate.errors.map((e) => {
    const extra = e.params?.additionalProperty ? ` (${e.params.additionalProperty})` : "";
    return `${e.instancePath || "/"} ${e.message}${extra}`;
  });
}

let status = 0;
for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const doc = JSON.parse(line);
  const name = `${doc.apiVersion} ${doc.kind}`;
  if (!models[name] && !crds[name]) {
    console.log(`no schema for ${name}`);
    status = 2;
    continue;
  }
  const failed = failures(doc);
  if (failed.length === 0) {
    console.log(`valid: ${name} ${doc.metadata?.name}`);
  } else {
    console.log(`INVALID: ${name} ${doc.metadata?.name}: ${failed.join("; ")}`);
    status = Math.max(status, 1);
  }
}
process.exit(status);

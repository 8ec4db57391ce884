// Validates custom resources against their CRDs' schemas (compiled by kubernetes-models
// from the projects' CRDs): one JSON document per line on stdin; prints each failure and
// exits 1 if any failed, 2 for a kind it has no schema of.
import { createInterface } from "node:readline";
import { HTTPRoute } from "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const kinds = {
  "gateway.networking.k8s.io/v1 HTTPRoute": HTTPRoute,
  "monitoring.coreos.com/v1 PrometheusRule": PrometheusRule,
  "monitoring.coreos.com/v1 ServiceMonitor": ServiceMonitor,
};
let status = 0;
for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const doc = JSON.parse(line);
  const name = `${doc.apiVersion} ${doc.kind}`;
  const Model = kinds[name];
  if (!Model) {
    console.log(`no schema for ${name}`);
    status = 2;
    continue;
  }
  try {
    new Model(doc).validate();
    console.log(`valid: ${name} ${doc.metadata?.name}`);
  } catch (e) {
    console.log(`INVALID: ${name} ${doc.metadata?.name}: ${e.message}`);
    status = Math.max(status, 1);
  }
}
process.exit(status);

//! The Kubernetes manifests: probes, resources, real settings, Pod Security, autoscaling, the migration Job, NetworkPolicies, the Ingress and HTTPRoute, kubernetes-validate.

use super::*;

/// ConfigMaps of deploy/k8s by name: their keys.
pub(super) fn config_maps(docs: &[Value]) -> BTreeMap<String, Vec<String>> {
    docs.iter()
        .filter(|d| d["kind"] == "ConfigMap")
        .map(|d| {
            let keys = d["data"]
                .as_mapping()
                .map(|m| m.keys().map(|k| str_of(k, "key").to_owned()).collect())
                .unwrap_or_default();
            (str_of(&d["metadata"]["name"], "name").to_owned(), keys)
        })
        .collect()
}

/// The manifests `kubectl apply -k deploy/k8s` applies, in its order.
pub(super) fn k8s_documents() -> Vec<Value> {
    let kustomization = documents("deploy/k8s/kustomization.yaml");
    let mut docs: Vec<Value> = kustomization[0]["resources"]
        .as_sequence()
        .expect("resources")
        .iter()
        .flat_map(|r| documents(&format!("deploy/k8s/{}", str_of(r, "resource"))))
        .collect();
    docs.extend(generated_config_maps("deploy/k8s", &kustomization[0]));
    docs
}

pub(super) fn name_of(doc: &Value) -> String {
    format!(
        "{} {}",
        str_of(&doc["kind"], "kind"),
        str_of(&doc["metadata"]["name"], "name")
    )
}

/// The pod templates of the Deployments and Jobs: (kind and name, pod spec).
fn pod_specs(docs: &[Value]) -> Vec<(String, &Value)> {
    docs.iter()
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "Job")
        .map(|d| (name_of(d), &d["spec"]["template"]["spec"]))
        .collect()
}

/// Every container of a pod spec, init containers too.
pub(super) fn containers(pod: &Value) -> Vec<&Value> {
    ["initContainers", "containers"]
        .iter()
        .flat_map(|k| pod[*k].as_sequence().into_iter().flatten())
        .collect()
}

#[test]
fn kubernetes_manifests_have_probes_resources_real_settings_and_every_path() {
    let docs = k8s_documents();
    let maps = config_maps(&docs);

    let mut deployments = BTreeSet::new();
    for (name, pod) in pod_specs(&docs) {
        let long_running = name.starts_with("Deployment ");
        for c in containers(pod) {
            if long_running {
                for probe in ["readinessProbe", "livenessProbe"] {
                    assert!(
                        c[probe]["httpGet"]["path"].is_string(),
                        "{name}: no {probe}"
                    );
                }
            }
            for kind in ["requests", "limits"] {
                let r = &c["resources"][kind];
                assert!(
                    r["cpu"].as_str().is_some() && r["memory"].as_str().is_some(),
                    "{name}: no {kind}"
                );
            }
            // The front's nginx has no settings of ours; the others name their binary.
            let Some(binary) = c["args"][0].as_str() else {
                assert!(
                    c["env"].is_null() && c["envFrom"].is_null(),
                    "{name}: settings for a container that runs none of our binaries"
                );
                continue;
            };
            let known = settings_of(binary);
            let mut names: Vec<String> = c["env"]
                .as_sequence()
                .map(|env| {
                    env.iter()
                        .map(|e| str_of(&e["name"], "env name").to_owned())
                        .collect()
                })
                .unwrap_or_default();
            for source in c["envFrom"].as_sequence().into_iter().flatten() {
                let map = str_of(&source["configMapRef"]["name"], "configMapRef");
                names.extend(
                    maps.get(map)
                        .unwrap_or_else(|| panic!("{name}: no ConfigMap {map}"))
                        .clone(),
                );
            }
            for var in names {
                assert!(
                    known.contains(&var),
                    "{name}: {var} is not read by {binary}"
                );
            }
        }
        if let Some(deployment) = name.strip_prefix("Deployment ") {
            deployments.insert(deployment.to_owned());
        }
    }
    assert_eq!(
        deployments,
        BTreeSet::from([
            "config-api".into(),
            "consumer".into(),
            "front".into(),
            "ingest".into(),
        ])
    );

    // Each Service selects a Deployment's pods; each Ingress path goes to a Service.
    let mut services = BTreeSet::new();
    for s in docs.iter().filter(|d| d["kind"] == "Service") {
        let name = str_of(&s["metadata"]["name"], "name");
        let app = str_of(&s["spec"]["selector"]["app"], "selector");
        assert!(
            deployments.contains(app),
            "Service {name} selects no Deployment"
        );
        services.insert(name.to_owned());
    }
    let paths = ingress_paths(&docs);
    for path in [
        "/api/v1/analytics",
        "/api/v1/experiments",
        "/sdk/v1/split.min.js",
        "/sdk/v1/split-autotrack.min.js",
        "/sdk/v1.0.0/split.min.js",
    ] {
        // Exact, or under a prefix (`/sdk/`: every version of the SDK's path).
        let (service, _) = paths
            .iter()
            .find(|(p, _)| *p == path || (p.ends_with('/') && path.starts_with(p.as_str())))
            .map(|(_, target)| target)
            .unwrap_or_else(|| panic!("the Ingress misses {path}"));
        assert!(services.contains(service), "{path} goes to no Service");
    }
    for kind in [
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Service",
        "NetworkPolicy",
        "Job",
    ] {
        assert!(docs.iter().any(|d| d["kind"] == kind), "no {kind}");
    }
}

/// The Ingress's paths: path → (Service, port name).
fn ingress_paths(docs: &[Value]) -> BTreeMap<String, (String, String)> {
    docs.iter()
        .filter(|d| d["kind"] == "Ingress")
        .flat_map(|d| d["spec"]["rules"].as_sequence().expect("rules").clone())
        .flat_map(|rule| rule["http"]["paths"].as_sequence().expect("paths").clone())
        .map(|p| {
            let service = &p["backend"]["service"];
            (
                str_of(&p["path"], "path").to_owned(),
                (
                    str_of(&service["name"], "backend").to_owned(),
                    str_of(&service["port"]["name"], "port name").to_owned(),
                ),
            )
        })
        .collect()
}

/// What a namespace labelled `pod-security.kubernetes.io/enforce: restricted` admits: in
/// every container of every Deployment and Job, no root, no privilege escalation, no
/// capability, the runtime's seccomp profile; beyond it, a read-only root filesystem whose
/// writable paths are emptyDirs, and no service account token.
#[test]
fn every_pod_meets_pod_security_restricted_with_writable_paths_on_empty_dirs() {
    let docs = k8s_documents();
    let namespace = docs
        .iter()
        .find(|d| d["kind"] == "Namespace")
        .expect("a Namespace");
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    let pods = pod_specs(&docs);
    assert_eq!(pods.len(), 5, "four Deployments and the migrations' Job");
    for (name, pod) in pods {
        let pod_context = &pod["securityContext"];
        assert_eq!(pod["automountServiceAccountToken"], false, "{name}");
        for field in ["hostNetwork", "hostPID", "hostIPC"] {
            assert!(
                pod[field].is_null() || pod[field] == false,
                "{name}: {field}"
            );
        }
        let volumes: BTreeMap<&str, &Value> = pod["volumes"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|v| (str_of(&v["name"], "volume"), v))
            .collect();
        assert!(
            volumes.values().all(|v| v["hostPath"].is_null()),
            "{name}: a hostPath volume"
        );
        for c in containers(pod) {
            let context = &c["securityContext"];
            let effective = |field: &str| {
                if context[field].is_null() {
                    &pod_context[field]
                } else {
                    &context[field]
                }
            };
            let container = format!("{name}, container {}", str_of(&c["name"], "name"));
            assert_eq!(effective("runAsNonRoot"), &Value::from(true), "{container}");
            if let Some(user) = effective("runAsUser").as_u64() {
                assert_ne!(user, 0, "{container}: runs as root");
            }
            assert_eq!(
                effective("seccompProfile")["type"],
                "RuntimeDefault",
                "{container}"
            );
            assert_eq!(context["allowPrivilegeEscalation"], false, "{container}");
            assert!(
                context["privileged"].is_null() || context["privileged"] == false,
                "{container}"
            );
            assert_eq!(
                context["capabilities"]["drop"],
                serde_yaml::from_str::<Value>("[ALL]").expect("YAML"),
                "{container}"
            );
            assert!(context["capabilities"]["add"].is_null(), "{container}");
            assert_eq!(context["readOnlyRootFilesystem"], true, "{container}");
            let mut writable = 0;
            for mount in c["volumeMounts"].as_sequence().into_iter().flatten() {
                let volume = str_of(&mount["name"], "mount");
                let source = volumes
                    .get(volume)
                    .unwrap_or_else(|| panic!("{container}: no volume {volume}"));
                if mount["readOnly"] != true {
                    writable += 1;
                    assert!(
                        source["emptyDir"].is_mapping(),
                        "{container}: {volume} is writable but not an emptyDir"
                    );
                }
            }
            assert!(
                writable >= 1,
                "{container}: no writable path (/tmp) beside the read-only root"
            );
        }
    }
}

/// `kubectl apply` would set a Deployment's `replicas` back at every apply, undoing what
/// its HorizontalPodAutoscaler decided: where one scales a Deployment, no count is written.
#[test]
fn no_deployment_that_an_autoscaler_scales_sets_its_replicas() {
    let docs = k8s_documents();
    let scaled: BTreeSet<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "HorizontalPodAutoscaler")
        .map(|h| {
            assert_eq!(h["spec"]["scaleTargetRef"]["kind"], "Deployment");
            str_of(&h["spec"]["scaleTargetRef"]["name"], "target")
        })
        .collect();
    assert_eq!(scaled, BTreeSet::from(["config-api", "front", "ingest"]));
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let name = str_of(&d["metadata"]["name"], "name");
        assert_eq!(
            scaled.contains(name),
            d["spec"]["replicas"].is_null(),
            "{name}: replicas {:?} (autoscaled: {})",
            d["spec"]["replicas"],
            scaled.contains(name)
        );
    }
}

/// The schema's migrations are a step of their own (a Job running `consumer
/// --migrate-only` against the consumer's ClickHouse), and a consumer that migrates at
/// start anyway is given a startup probe long enough for a cluster's migration (minutes),
/// before its liveness probe may restart it.
#[test]
fn the_migrations_run_in_a_job_and_the_consumer_has_a_startup_probe() {
    let docs = k8s_documents();
    let job = docs
        .iter()
        .find(|d| d["kind"] == "Job")
        .expect("the migrations' Job");
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["args"],
        serde_yaml::from_str::<Value>("[consumer, --migrate-only]").expect("YAML")
    );
    let consumer = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "consumer")
        .expect("consumer");
    let consumer = &consumer["spec"]["template"]["spec"]["containers"][0];
    // The same image and database as the consumer, a user of its own: the one with DDL.
    assert_eq!(container["image"], consumer["image"]);
    let clickhouse =
        serde_yaml::from_str::<Value>("{configMapRef: {name: clickhouse-settings}}").expect("YAML");
    assert!(
        container["envFrom"]
            .as_sequence()
            .expect("envFrom")
            .contains(&clickhouse)
    );
    let secret = |c: &Value| {
        env_var(c, "CLICKHOUSE_PASSWORD").expect("CLICKHOUSE_PASSWORD")["valueFrom"]["secretKeyRef"]
            .clone()
    };
    assert_eq!(secret(container)["name"], secret(consumer)["name"]);
    assert_eq!(secret(container)["key"], "migrator-password");
    assert_eq!(secret(consumer)["key"], "password");
    let user = env_var(container, "CLICKHOUSE_USER").expect("the Job's own user");
    assert_eq!(user["value"], "migrator");

    let startup = &consumer["startupProbe"];
    assert_eq!(startup["httpGet"]["path"], "/healthz");
    let period = startup["periodSeconds"].as_u64().unwrap_or(10);
    let failures = startup["failureThreshold"].as_u64().unwrap_or(3);
    assert!(
        period * failures >= 180,
        "the consumer gets {}s to migrate and start",
        period * failures
    );
}

/// Named ports of the Deployments' pods by app: port name → number.
fn app_ports(docs: &[Value]) -> BTreeMap<String, BTreeSet<u64>> {
    docs.iter()
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "Job")
        .map(|d| {
            let app = str_of(&d["spec"]["template"]["metadata"]["labels"]["app"], "app");
            let ports = containers(&d["spec"]["template"]["spec"])
                .into_iter()
                .flat_map(|c| c["ports"].as_sequence().cloned().unwrap_or_default())
                .filter_map(|p| p["containerPort"].as_u64())
                .collect();
            (app.to_owned(), ports)
        })
        .collect()
}

/// Everything is denied, then only the pipeline's flows are let through: inside the
/// namespace exactly front → ingest and front → config-api, each on a port its pods
/// listen on; every pod is selected by a policy of its own with both directions.
#[test]
fn network_policies_deny_by_default_and_allow_only_the_pipeline_s_flows() {
    let docs = k8s_documents();
    let policies: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "NetworkPolicy")
        .collect();
    let both = serde_yaml::from_str::<Value>("[Ingress, Egress]").expect("YAML");
    assert!(
        policies.iter().any(|p| p["spec"]["podSelector"]
            .as_mapping()
            .is_some_and(|m| m.is_empty())
            && p["spec"]["policyTypes"] == both
            && p["spec"]["ingress"].is_null()
            && p["spec"]["egress"].is_null()),
        "no default deny of both directions"
    );
    let ports = app_ports(&docs);
    let mut selected = BTreeSet::new();
    let mut flows = BTreeSet::new();
    for policy in &policies {
        let Some(app) = policy["spec"]["podSelector"]["matchLabels"]["app"].as_str() else {
            continue;
        };
        let name = name_of(policy);
        assert_eq!(policy["spec"]["policyTypes"], both, "{name}");
        selected.insert(app.to_owned());
        // The tools' pods are started by hand (`kubectl run --labels=app=tools`).
        let none = BTreeSet::new();
        let own = match app {
            "tools" => &none,
            _ => ports
                .get(app)
                .unwrap_or_else(|| panic!("{name} selects no pods")),
        };
        for rule in policy["spec"]["ingress"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            for port in rule["ports"].as_sequence().expect("ports on every rule") {
                let number = port["port"].as_u64().expect("a port number");
                assert!(
                    own.contains(&number),
                    "{name}: {app} listens on no {number}"
                );
            }
        }
        for rule in policy["spec"]["egress"].as_sequence().into_iter().flatten() {
            assert!(rule["ports"].is_sequence(), "{name}: an egress to any port");
            for peer in rule["to"].as_sequence().expect("egress peers") {
                assert!(peer["ipBlock"].is_null(), "{name}: an egress to addresses");
                let Some(to) = peer["podSelector"]["matchLabels"]["app"].as_str() else {
                    assert!(
                        peer["namespaceSelector"]["matchLabels"]
                            .as_mapping()
                            .is_some_and(|m| !m.is_empty()),
                        "{name}: an egress to every namespace"
                    );
                    continue;
                };
                if !peer["namespaceSelector"].is_null() {
                    continue; // another namespace's pods (the cluster DNS)
                }
                for port in rule["ports"].as_sequence().expect("ports") {
                    let number = port["port"].as_u64().expect("a port number");
                    let theirs = ports
                        .get(to)
                        .unwrap_or_else(|| panic!("{name}: no pods {to}"));
                    assert!(
                        theirs.contains(&number),
                        "{name}: {to} listens on no {number}"
                    );
                    flows.insert(format!("{app} -> {to}:{number}"));
                }
            }
        }
    }
    let mut apps: BTreeSet<String> = ports.keys().cloned().collect();
    apps.insert("tools".into());
    assert_eq!(selected, apps);
    assert_eq!(
        flows,
        BTreeSet::from([
            "front -> config-api:8082".to_owned(),
            "front -> ingest:8081".to_owned(),
        ])
    );
}

/// The Ingress works with any controller: no class written in it (the cluster's default,
/// or the one the commented patch of kustomization.yaml sets) and the front behind every
/// path; the Gateway API component routes the same paths to the same Service and port, and
/// removes the Ingress.
#[test]
fn the_ingress_has_no_fixed_class_and_the_http_route_routes_the_same_paths() {
    let docs = k8s_documents();
    let ingress = docs
        .iter()
        .find(|d| d["kind"] == "Ingress")
        .expect("Ingress");
    assert!(
        ingress["spec"]["ingressClassName"].is_null(),
        "a fixed class"
    );
    assert!(read("deploy/k8s/kustomization.yaml").contains("/spec/ingressClassName"));
    let service_port = |service: &str, port: &str| {
        docs.iter()
            .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == service)
            .and_then(|s| {
                s["spec"]["ports"]
                    .as_sequence()?
                    .iter()
                    .find(|p| p["name"] == port)
            })
            .and_then(|p| p["port"].as_u64())
            .unwrap_or_else(|| panic!("no port {port} on Service {service}"))
    };
    let by_ingress: BTreeMap<String, (String, u64)> = ingress_paths(&docs)
        .into_iter()
        .map(|(path, (service, port))| {
            let number = service_port(&service, &port);
            (path, (service, number))
        })
        .collect();
    assert!(by_ingress.values().all(|(s, _)| s == "front"));

    let component = documents("deploy/k8s/gateway-api/kustomization.yaml");
    assert_eq!(component[0]["kind"], "Component");
    assert!(
        component[0]["patches"][0]["patch"]
            .as_str()
            .is_some_and(|p| p.contains("$patch: delete") && p.contains("kind: Ingress"))
    );
    assert!(read("deploy/k8s/kustomization.yaml").contains("#   - gateway-api"));
    let route = documents("deploy/k8s/gateway-api/httproute.yaml");
    let mut by_route = BTreeMap::new();
    for rule in route[0]["spec"]["rules"].as_sequence().expect("rules") {
        let backend = &rule["backendRefs"][0];
        for matched in rule["matches"].as_sequence().expect("matches") {
            let want = if matched["path"]["value"] == "/sdk/" {
                "PathPrefix"
            } else {
                "Exact"
            };
            assert_eq!(matched["path"]["type"], want);
            by_route.insert(
                str_of(&matched["path"]["value"], "path").to_owned(),
                (
                    str_of(&backend["name"], "backend").to_owned(),
                    backend["port"].as_u64().expect("port"),
                ),
            );
        }
    }
    assert_eq!(by_route, by_ingress);
}

/// Runs a command with `input` on its standard input: (success, stdout and stderr).
fn run_with_input(mut command: std::process::Command, input: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?} does not run (scripts/test installs it): {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("written");
    let output = child.wait_with_output().expect("it ends");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// kubernetes-validate (Kubernetes' own schemas), strict: an unknown field fails.
fn kubernetes_validate() -> std::process::Command {
    let mut command = deploy_check("kubernetes-validate");
    command.arg("--strict");
    command
}

/// Custom resources checked against their projects' CRD schemas: compiled to validators by
/// kubernetes-models (npm packages installed by scripts/test in e2e/tests/k8s-schemas), or
/// the CRDs kept in e2e/tests/k8s-schemas/crds, checked with ajv. One line of report per
/// document, in their order.
pub(super) fn validate_custom_resources(docs: &[Value]) -> (bool, String) {
    let dir = repo().join("e2e/tests/k8s-schemas");
    assert!(
        dir.join("node_modules").is_dir(),
        "scripts/test installs e2e/tests/k8s-schemas (npm ci)"
    );
    let lines: Vec<String> = docs
        .iter()
        .map(|d| serde_json::to_string(d).expect("JSON"))
        .collect();
    let mut command = std::process::Command::new("node");
    command.arg(dir.join("validate.mjs")).current_dir(&dir);
    run_with_input(command, &lines.join("\n"))
}

/// Every manifest of deploy/k8s passes kubernetes-validate in strict mode, and the custom
/// resources (the HTTPRoute, the PrometheusRule, the operators' Kafka and ClickHouse)
/// their CRDs' schemas; both checkers are first shown a broken manifest, which they must
/// refuse.
#[test]
fn kubernetes_manifests_pass_kubernetes_validate_and_the_crds_schemas() {
    let mut files = vec![];
    let mut pending = vec![repo().join("deploy/k8s")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml")
                && path.file_name().is_some_and(|n| n != "kustomization.yaml")
            {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 10, "{files:?}");

    // A misspelt field: kubernetes-validate must refuse it.
    let dir = tempfile::tempdir().expect("folder");
    let broken = dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        read("deploy/k8s/ingest.yaml").replacen("readinessProbe:", "readynessProbe:", 1),
    )
    .expect("written");
    let refused = kubernetes_validate()
        .arg(&broken)
        .output()
        .expect("kubernetes-validate runs (scripts/test installs it)");
    assert!(
        !refused.status.success(),
        "kubernetes-validate let a typo through"
    );

    let output = kubernetes_validate()
        .arg("--quiet")
        .args(&files)
        .output()
        .expect("kubernetes-validate runs (scripts/test installs it)");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "kubernetes-validate:\n{report}");
    // Kinds with no schema in Kubernetes: each is a custom resource checked below against
    // its CRD's schema.
    let custom = [
        "HTTPRoute",
        "PrometheusRule",
        "ServiceMonitor",
        "Kafka",
        "KafkaNodePool",
        "KafkaTopic",
        "KafkaUser",
        "ClickHouseInstallation",
        "ClickHouseKeeperInstallation",
    ];
    for line in report.lines().filter(|l| l.starts_with("WARN")) {
        assert!(
            custom.iter().any(|k| line.contains(&format!("kind {k} "))),
            "no schema for {line}"
        );
    }

    let mut resources: Vec<Value> = files
        .iter()
        .flat_map(|f| {
            documents(
                f.strip_prefix(repo())
                    .expect("in the repository")
                    .to_str()
                    .expect("UTF-8"),
            )
        })
        .filter(|d| custom.iter().any(|k| d["kind"] == *k))
        .collect();
    resources.extend(documents("deploy/monitoring/prometheus-rule.yaml"));
    resources.extend(documents("deploy/monitoring/service-monitor.yaml"));
    let kinds: BTreeSet<&str> = resources
        .iter()
        .map(|d| str_of(&d["kind"], "kind"))
        .collect();
    assert_eq!(kinds, BTreeSet::from(custom));
    // The ServiceMonitor scrapes the three services, by a port they name.
    let monitor = resources
        .iter()
        .find(|d| d["kind"] == "ServiceMonitor")
        .expect("ServiceMonitor");
    let selector = &monitor["spec"]["selector"]["matchLabels"];
    let port = &monitor["spec"]["endpoints"][0]["port"];
    let services = k8s_documents();
    let scraped: BTreeSet<&str> = services
        .iter()
        .filter(|d| d["kind"] == "Service")
        .filter(|s| {
            selector
                .as_mapping()
                .expect("matchLabels")
                .iter()
                .all(|(k, v)| &s["metadata"]["labels"][k] == v)
        })
        .filter(|s| {
            s["spec"]["ports"]
                .as_sequence()
                .is_some_and(|ports| ports.iter().any(|p| &p["name"] == port))
        })
        .map(|s| str_of(&s["metadata"]["name"], "name"))
        .collect();
    assert_eq!(
        scraped,
        BTreeSet::from(["config-api", "consumer", "ingest"])
    );
    let mut bad = resources
        .iter()
        .find(|d| d["kind"] == "HTTPRoute")
        .expect("HTTPRoute")
        .clone();
    bad["spec"]["rules"][0]["matches"][0]["path"]["type"] = "Bogus".into();
    let (accepted, report) = validate_custom_resources(&[bad]);
    assert!(
        !accepted,
        "the CRD schema let a wrong path type through: {report}"
    );
    let (accepted, report) = validate_custom_resources(&resources);
    assert!(accepted, "{report}");
    assert_eq!(
        report.matches("valid: ").count(),
        resources.len(),
        "{report}"
    );
}

/// Drains lose nothing: every Deployment spreads its replicas over zones and nodes; every
/// PodDisruptionBudget lets a pod that is not ready go (an outage never blocks a node
/// drain); the front waits before its stop signal while the endpoints drop it; the
/// config-api and the ingest turn unready and keep serving for a drain shorter than their
/// grace period.
#[test]
fn drains_and_scale_downs_lose_no_request() {
    let docs = k8s_documents();
    let of = |kind: &str| -> Vec<&Value> { docs.iter().filter(|d| d["kind"] == kind).collect() };
    let deployments = of("Deployment");
    assert_eq!(deployments.len(), 4);
    for d in &deployments {
        let name = name_of(d);
        let app = &d["spec"]["template"]["metadata"]["labels"]["app"];
        let spec = &d["spec"]["template"]["spec"];
        let keys: BTreeSet<&str> = spec["topologySpreadConstraints"]
            .as_sequence()
            .unwrap_or_else(|| panic!("{name}: no topologySpreadConstraints"))
            .iter()
            .map(|c| {
                assert_eq!(c["labelSelector"]["matchLabels"]["app"], *app, "{name}");
                str_of(&c["topologyKey"], "topologyKey")
            })
            .collect();
        assert_eq!(
            keys,
            BTreeSet::from(["topology.kubernetes.io/zone", "kubernetes.io/hostname"]),
            "{name}"
        );
    }
    let budgets = of("PodDisruptionBudget");
    assert_eq!(budgets.len(), 4);
    for b in budgets {
        assert_eq!(
            b["spec"]["unhealthyPodEvictionPolicy"],
            "AlwaysAllow",
            "{}",
            name_of(b)
        );
    }
    let container = |name: &str| {
        let d = deployments
            .iter()
            .find(|d| d["metadata"]["name"] == name)
            .expect("deployment");
        let spec = &d["spec"]["template"]["spec"];
        let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
        (spec["containers"][0].clone(), grace)
    };
    let (front, _) = container("front");
    assert_eq!(
        front["lifecycle"]["preStop"]["exec"]["command"],
        serde_yaml::from_str::<Value>("[sleep, \"5\"]").expect("YAML")
    );
    for (service, variable) in [
        ("config-api", "CONFIG_API_SHUTDOWN_DRAIN_MS"),
        ("ingest", "INGEST_SHUTDOWN_DRAIN_MS"),
    ] {
        let (c, grace) = container(service);
        let drain: u64 = env_var(&c, variable)
            .and_then(|e| e["value"].as_str()?.parse().ok())
            .unwrap_or_else(|| panic!("{service}: no {variable}"));
        assert!(
            (1000..grace * 1000 / 2).contains(&drain),
            "{service}: a drain of {drain} ms in a grace of {grace} s"
        );
    }
}

/// The migrations fit the deploy tools: the Job is an Argo CD Sync hook deleted before the
/// next one, Flux re-creates it when its template changes, and no TTL makes a tool run it
/// again; the consumers do not migrate (no DDL at run time) and wait for it, alive.
#[test]
fn the_migration_job_fits_deploy_tools_and_the_consumers_wait_for_it() {
    let docs = k8s_documents();
    let job = docs
        .iter()
        .find(|d| d["kind"] == "Job" && d["metadata"]["name"] == "consumer-migrate")
        .expect("the migration Job");
    let annotations = &job["metadata"]["annotations"];
    assert_eq!(annotations["argocd.argoproj.io/hook"], "Sync");
    assert_eq!(
        annotations["argocd.argoproj.io/hook-delete-policy"],
        "BeforeHookCreation"
    );
    assert_eq!(annotations["kustomize.toolkit.fluxcd.io/force"], "enabled");
    assert!(job["spec"]["ttlSecondsAfterFinished"].is_null());
    let consumer = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "consumer")
        .expect("the consumer");
    let container = &consumer["spec"]["template"]["spec"]["containers"][0];
    let migrate = env_var(container, "CONSUMER_MIGRATE").expect("CONSUMER_MIGRATE");
    assert_eq!(migrate["value"], "false");
    assert_eq!(container["startupProbe"]["httpGet"]["path"], "/healthz");
}

/// The base URL is served over TLS: the Ingress names a certificate Secret for each of its
/// hosts (cert-manager's annotation issues it), and the HTTPRoute attaches to the
/// Gateway's HTTPS listener.
#[test]
fn the_ingress_and_the_http_route_serve_tls() {
    let docs = k8s_documents();
    let ingress = docs
        .iter()
        .find(|d| d["kind"] == "Ingress")
        .expect("the Ingress");
    let tls = ingress["spec"]["tls"].as_sequence().expect("tls");
    for rule in ingress["spec"]["rules"].as_sequence().expect("rules") {
        let host = &rule["host"];
        assert!(
            tls.iter().any(
                |t| t["hosts"].as_sequence().is_some_and(|h| h.contains(host))
                    && t["secretName"].is_string()
            ),
            "{host:?} has no certificate"
        );
    }
    assert!(ingress["metadata"]["annotations"]["cert-manager.io/cluster-issuer"].is_string());
    let route = &documents("deploy/k8s/gateway-api/httproute.yaml")[0];
    assert_eq!(route["spec"]["parentRefs"][0]["sectionName"], "https");
}

/// A changed setting rolls the pods that read it, and only those: kustomize names each
/// generated ConfigMap by a hash of its content, and the pod templates that take it name
/// the new ConfigMap (a template that changes is a rollout). Built by kubectl where it is
/// installed.
#[test]
fn settings_changes_roll_the_pods_that_read_them() {
    let dir = tempfile::tempdir().expect("folder");
    let copy = dir.path().join("k8s");
    copy_folder(&repo().join("deploy/k8s"), &copy);
    let Some(before) = kubectl_kustomize(&copy) else {
        return eprintln!("no kubectl: the generators are read, not built");
    };
    let env = copy.join("settings/kafka.env");
    let text = std::fs::read_to_string(&env).expect("kafka.env");
    assert!(text.contains("\nKAFKA_TOPIC_PARTITIONS=12\n"));
    std::fs::write(
        &env,
        text.replace(
            "\nKAFKA_TOPIC_PARTITIONS=12\n",
            "\nKAFKA_TOPIC_PARTITIONS=24\n",
        ),
    )
    .expect("written");
    let after = kubectl_kustomize(&copy).expect("kubectl");

    // Each pod template: the ConfigMaps it takes, by the name kustomize built.
    let taken = |docs: &[Value]| -> BTreeMap<String, BTreeSet<String>> {
        pod_specs(docs)
            .into_iter()
            .map(|(name, spec)| {
                let maps = spec["containers"]
                    .as_sequence()
                    .expect("containers")
                    .iter()
                    .filter_map(|c| c["envFrom"].as_sequence())
                    .flatten()
                    .filter_map(|from| from["configMapRef"]["name"].as_str())
                    .map(str::to_owned)
                    .collect();
                (name, maps)
            })
            .collect()
    };
    let (before_taken, after_taken) = (taken(&before), taken(&after));
    let built: BTreeSet<String> = after
        .iter()
        .filter(|d| d["kind"] == "ConfigMap")
        .map(|d| str_of(&d["metadata"]["name"], "name").to_owned())
        .collect();
    for (pod, maps) in &after_taken {
        let reads_kafka = maps.iter().any(|m| m.starts_with("kafka-settings-"));
        for map in maps {
            assert!(built.contains(map), "{pod} takes {map}, which is not built");
            assert_ne!(
                unhashed(&format!("ConfigMap {map}")),
                format!("ConfigMap {map}")
            );
        }
        assert_eq!(
            before_taken[pod] != *maps,
            reads_kafka,
            "{pod}: {:?} then {maps:?}",
            before_taken[pod]
        );
    }
    let rolled = after_taken
        .iter()
        .filter(|(pod, maps)| before_taken[*pod] != **maps)
        .map(|(pod, _)| pod.as_str())
        .collect::<Vec<_>>();
    assert_eq!(rolled, ["Deployment consumer", "Deployment ingest"]);
}

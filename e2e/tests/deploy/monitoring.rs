//! Monitoring: the alert rules pass promtool, the dashboard and rules use exported metrics, every exported metric is listed with HELP, the operating page names them.

use super::*;

/// `promtool` (Debian's prometheus package, installed by scripts/test) on a rules file.
fn promtool_check_rules(path: &Path) -> (bool, String) {
    let output = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(path)
        .output()
        .expect("promtool runs (scripts/test installs Debian's prometheus)");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// The alert rules pass `promtool check rules`, and the PrometheusRule holds the very same
/// groups (its schema is checked with the other custom resources); promtool is first shown
/// a rule with a broken expression, which it must refuse.
#[test]
fn the_alert_rules_pass_promtool_and_the_prometheus_rule_holds_the_same_groups() {
    let (ok, report) = promtool_check_rules(&repo().join("deploy/monitoring/alerts.yaml"));
    assert!(ok, "{report}");
    let dir = tempfile::tempdir().expect("folder");
    let broken = dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: sum(rate(x[5m])\n",
    )
    .expect("written");
    assert!(
        !promtool_check_rules(&broken).0,
        "promtool let a broken rule through"
    );

    let alerts = documents("deploy/monitoring/alerts.yaml");
    let rule = documents("deploy/monitoring/prometheus-rule.yaml");
    assert_eq!(rule[0]["kind"], "PrometheusRule");
    assert_eq!(rule[0]["spec"]["groups"], alerts[0]["groups"]);
    let count = alerts[0]["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .map(|g| g["rules"].as_sequence().expect("rules").len())
        .sum::<usize>();
    assert!(count >= 10, "{count} rules");
}

/// The metric names in a PromQL expression (all of ours start with a service's prefix, or
/// are the serving loop's `http_request_duration_seconds`).
fn metric_names(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            ["ingest_", "consumer_", "config_api_", "http_request_"]
                .iter()
                .any(|p| w.starts_with(p))
        })
        .map(str::to_owned)
        .collect()
}

/// Every expression of the dashboard and the alert rules names only metrics the services
/// export (http-kit's list: a histogram by its `_bucket`, `_sum` or `_count` series, never
/// bare), the dashboard's expressions pass promtool (as recording rules), and the
/// dashboard covers ingest rate and rejections, Kafka delivery, consumer lag and insert
/// time, the config-api, snapshot reloads and the dead letters.
#[test]
fn the_dashboard_and_rules_use_only_metrics_the_services_export() {
    use http_kit::telemetry::{Kind, METRICS};
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("deploy/monitoring/dashboard.json")).expect("JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let dashboard_exprs: Vec<String> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().expect("expr").to_owned())
        .collect();
    let alerts = documents("deploy/monitoring/alerts.yaml");
    let rule_exprs: Vec<String> = alerts[0]["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
        .map(|r| str_of(&r["expr"], "expr").to_owned())
        .collect();

    let mut used = BTreeSet::new();
    for expr in dashboard_exprs.iter().chain(&rule_exprs) {
        let names = metric_names(expr);
        // Prometheus's own `up` (whether it scrapes the services at all), and the ingress
        // controller's count of the base URL's answers.
        if expr.contains("up{job") || expr.contains("nginx_ingress_controller_requests") {
            continue;
        }
        assert!(!names.is_empty(), "no metric of ours in {expr}");
        for name in names {
            let exported = METRICS.iter().find_map(|m| match m.kind {
                Kind::Histogram(_) => ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| name == format!("{}{suffix}", m.name))
                    .then_some(m.name),
                _ => (name == m.name).then_some(m.name),
            });
            let metric = exported.unwrap_or_else(|| {
                panic!("{name} (in {expr}) is not a metric the services export")
            });
            used.insert(metric);
        }
    }
    for topic in [
        "ingest_requests_total",
        "ingest_events_accepted_total",
        "ingest_events_rejected_total",
        "ingest_delivery_seconds",
        "ingest_delivery_errors_total",
        "consumer_lag_messages",
        "consumer_insert_seconds",
        "config_api_requests_total",
        "config_api_snapshot_reloads_total",
        "consumer_dead_letters_total",
    ] {
        assert!(
            used.contains(topic),
            "neither the dashboard nor the rules show {topic}"
        );
    }
    for (panel, want) in [
        ("ingest", "ingest_requests_total"),
        ("lag", "consumer_lag_messages"),
    ] {
        assert!(
            dashboard_exprs.iter().any(|e| e.contains(want)),
            "the dashboard has no {panel} panel"
        );
    }

    // The dashboard's queries are valid PromQL: promtool checks them as recording rules.
    let dir = tempfile::tempdir().expect("folder");
    let rules = dir.path().join("dashboard-rules.yaml");
    let mut text = "groups:\n  - name: dashboard\n    rules:\n".to_owned();
    for (i, expr) in dashboard_exprs.iter().enumerate() {
        text.push_str(&format!(
            "      - record: dashboard:panel_{i}\n        expr: {}\n",
            serde_json::to_string(expr).expect("JSON string")
        ));
    }
    std::fs::write(&rules, text).expect("written");
    let (ok, report) = promtool_check_rules(&rules);
    assert!(ok, "{report}");
}

/// What the services really export, scraped from `/metrics` after they worked (an event
/// accepted, delivered and inserted; experiments served): every metric family is in
/// http-kit's list, with its HELP text and its kind; latencies are histograms with their
/// explicit buckets, never summaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_services_export_is_listed_with_help_and_latencies_are_histograms() {
    use http_kit::telemetry::{Kind, METRICS};
    let names = e2e::ConsumerNames::unique();
    let file = e2e::one_experiment_snapshot("pk_metrics");
    let consumer = e2e::start_consumer(e2e::consumer_config(&names, &[])).await;
    let ingest = e2e::start_ingest(e2e::ingest_config(&file.path, &names.topic, &[])).await;
    let config_api = e2e::start_config_api(&file.path).await;
    let http = reqwest::Client::new();
    let (batch, _) = e2e::client_batch("s-metrics", 3);
    let answer = http
        .post(ingest.url("/api/v1/analytics"))
        .header("X-public-key", "pk_metrics")
        .json(&batch)
        .send()
        .await
        .expect("ingest answers");
    assert_eq!(answer.status(), 202);
    let served = http
        .get(config_api.url("/api/v1/experiments"))
        .header("X-public-key", "pk_metrics")
        .send()
        .await
        .expect("config-api answers");
    assert_eq!(served.status(), 200);
    let ch = e2e::clickhouse(&names.database);
    e2e::wait_for_events(&ch, 3, std::time::Duration::from_secs(120)).await;

    // The three services of this process share one recorder; each renders all of it. The
    // consumer records an insert's time just after ClickHouse answered, which may be after
    // the rows are seen: scrape until the insert shows.
    let mut text = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !text.contains("consumer_insert_seconds_count") && std::time::Instant::now() < deadline {
        text.clear();
        for service in [&ingest, &config_api, &consumer] {
            text.push_str(&e2e::metrics_text(&service.url("/metrics")).await);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut types = BTreeMap::new();
    let mut helps = BTreeMap::new();
    for line in text.lines() {
        let words: Vec<&str> = line.splitn(4, ' ').collect();
        match words.as_slice() {
            ["#", "TYPE", name, kind] => {
                types.insert(name.to_string(), kind.to_string());
            }
            ["#", "HELP", name, help] => {
                helps.insert(name.to_string(), help.to_string());
            }
            _ => {}
        }
    }
    let ours: BTreeMap<&String, &String> = types
        .iter()
        .filter(|(n, _)| !metric_names(n).is_empty())
        .collect();
    for sample in [
        r#"http_request_duration_seconds_count{route="/api/v1/analytics",status="202"}"#,
        r#"http_request_duration_seconds_count{route="/api/v1/experiments",status="200"}"#,
        r#"http_request_duration_seconds_count{route="/metrics",status="200"}"#,
    ] {
        assert!(text.contains(sample), "no {sample}:\n{text}");
    }
    for must in [
        "http_request_duration_seconds",
        "ingest_requests_total",
        "ingest_delivery_seconds",
        "config_api_requests_total",
        "consumer_insert_seconds",
        "consumer_batch_rows",
        "consumer_rows_inserted_total",
    ] {
        assert!(
            ours.contains_key(&must.to_owned()),
            "{must} not exported:\n{text}"
        );
    }
    for (name, kind) in ours {
        let listed = METRICS
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("{name} is exported but not in http-kit's list"));
        let want = match listed.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram(buckets) => {
                let le = format!("le=\"{}\"}}", buckets[0]);
                assert!(
                    text.lines()
                        .any(|l| l.starts_with(&format!("{name}_bucket{{")) && l.contains(&le)),
                    "{name}: no bucket {le}"
                );
                "histogram"
            }
        };
        assert_eq!(kind, want, "{name}");
        assert_eq!(
            helps.get(name).map(String::as_str),
            Some(listed.help),
            "{name}"
        );
    }

    config_api.stop().await.expect("clean stop");
    ingest.stop().await.expect("clean stop");
    consumer.stop().await.expect("clean stop");
}

/// docs/operating.md's metrics are the services': every metric name it writes (a
/// `<service>_` one standing for the three) is in http-kit's list, and every metric of the
/// list is on the page.
#[test]
fn the_operating_page_names_every_metric_and_only_those() {
    use http_kit::telemetry::METRICS;
    let page = read("docs/operating.md");
    let mut named = BTreeSet::new();
    for span in page.split('`').skip(1).step_by(2) {
        let span = span.split('{').next().unwrap_or(span);
        if let Some(rest) = span.strip_prefix("<service>_") {
            for service in ["ingest", "config_api", "consumer"] {
                named.insert(format!("{service}_{rest}"));
            }
        } else if !metric_names(span).is_empty()
            && metric_names(span).len() == 1
            && !span.contains(' ')
        {
            named.insert(span.to_owned());
        }
    }
    let listed: BTreeSet<String> = METRICS.iter().map(|m| m.name.to_owned()).collect();
    let unknown: Vec<_> = named.difference(&listed).collect();
    assert!(unknown.is_empty(), "docs/operating.md names {unknown:?}");
    let missing: Vec<_> = listed.difference(&named).collect();
    assert!(missing.is_empty(), "docs/operating.md misses {missing:?}");
}

/// Every alert rule of alerts.yaml, as YAML.
fn alert_rules() -> Vec<Value> {
    documents("deploy/monitoring/alerts.yaml")[0]["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
        .collect()
}

/// `promtool test rules` on the alerts' unit tests, with alerts.yaml replaced by `alerts`.
fn promtool_test_rules(alerts: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("folder");
    std::fs::write(dir.path().join("alerts.yaml"), alerts).expect("written");
    std::fs::write(
        dir.path().join("alerts.test.yaml"),
        read("deploy/monitoring/alerts.test.yaml"),
    )
    .expect("written");
    let output = std::process::Command::new("promtool")
        .args(["test", "rules", "alerts.test.yaml"])
        .current_dir(dir.path())
        .output()
        .expect("promtool runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    )
}

/// Each alert fires in its unit test's namespace past its threshold and stays quiet in the
/// other and before its `for`; a rule that sums over every namespace fails them.
#[test]
fn every_alert_fires_and_stays_quiet_as_its_promtool_tests_say() {
    let alerts = read("deploy/monitoring/alerts.yaml");
    let (ok, report) = promtool_test_rules(&alerts);
    assert!(ok, "{report}");
    let broken = alerts.replace("sum by (namespace, job) (up{job", "sum by (job) (up{job");
    assert_ne!(broken, alerts);
    assert!(
        !promtool_test_rules(&broken).0,
        "promtool's tests missed a broken rule"
    );

    let tests = documents("deploy/monitoring/alerts.test.yaml");
    let evals: Vec<&Value> = tests[0]["tests"]
        .as_sequence()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_sequence().expect("evals"))
        .collect();
    for rule in alert_rules() {
        let name = str_of(&rule["alert"], "alert");
        let of = |firing: bool| {
            evals.iter().any(|e| {
                e["alertname"] == name
                    && e["exp_alerts"]
                        .as_sequence()
                        .expect("exp_alerts")
                        .is_empty()
                        != firing
            })
        };
        assert!(of(true), "{name}: no unit test where it fires");
        assert!(of(false), "{name}: no unit test where it stays quiet");
    }
}

/// The conventions of Alertmanager's routes and of runbooks: each alert's severity is
/// `critical` or `warning`, its runbook a section of docs/operating.md named after it, and
/// its sums are per namespace (one Prometheus may watch several pipelines).
#[test]
fn every_alert_has_a_severity_a_runbook_and_sums_per_namespace() {
    let operating = read("docs/operating.md");
    let rules = alert_rules();
    assert!(rules.len() >= 18, "{} alerts", rules.len());
    for rule in &rules {
        let name = str_of(&rule["alert"], "alert");
        let severity = str_of(&rule["labels"]["severity"], "severity");
        assert!(
            ["critical", "warning"].contains(&severity),
            "{name}: {severity}"
        );
        let anchor = name.to_lowercase();
        assert_eq!(
            rule["annotations"]["runbook_url"].as_str(),
            Some(format!("docs/operating.md#{anchor}").as_str()),
            "{name}"
        );
        assert!(
            operating.contains(&format!("\n#### {name}\n")),
            "docs/operating.md has no runbook section #### {name}"
        );
        let expr = str_of(&rule["expr"], "expr");
        if expr.starts_with("absent(") {
            continue;
        }
        for aggregation in ["sum", "max", "count", "min", "avg"] {
            for (at, _) in expr.match_indices(&format!("{aggregation} ")) {
                assert!(
                    expr[at..].starts_with(&format!("{aggregation} by (namespace")),
                    "{name}: an aggregation not per namespace in {expr}"
                );
            }
            let bare = expr
                .match_indices(&format!("{aggregation}("))
                .any(|(at, _)| {
                    !expr[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                });
            assert!(!bare, "{name}: an aggregation not per namespace in {expr}");
        }
    }
}

/// The monitoring component builds (where kubectl is installed): the ServiceMonitor and
/// the PrometheusRule with the label that kube-prometheus-stack selects, and the dashboard
/// as a ConfigMap for Grafana's sidecar.
#[test]
fn the_monitoring_component_builds_with_its_selector_labels() {
    let dir = tempfile::tempdir().expect("folder");
    let overlay = dir.path().join("overlay");
    std::fs::create_dir(&overlay).expect("folder");
    let component = dir.path().join("monitoring");
    std::fs::create_dir(&component).expect("folder");
    for entry in std::fs::read_dir(repo().join("deploy/monitoring")).expect("folder") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, component.join(path.file_name().expect("name"))).expect("copied");
    }
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         namespace: split-pipeline\ncomponents:\n  - ../monitoring\n",
    )
    .expect("written");
    let Ok(output) = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(&overlay)
        .output()
    else {
        return eprintln!("no kubectl: the component is read, not built");
    };
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let docs: Vec<Value> =
        serde_yaml::Deserializer::from_str(&String::from_utf8_lossy(&output.stdout))
            .map(|d| Value::deserialize(d).expect("YAML"))
            .collect();
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"] == k)
            .unwrap_or_else(|| panic!("no {k}"))
    };
    for k in ["ServiceMonitor", "PrometheusRule"] {
        assert_eq!(
            kind(k)["metadata"]["labels"]["release"],
            "kube-prometheus-stack",
            "{k}"
        );
    }
    let dashboard = kind("ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    assert!(
        dashboard["data"]["split-pipeline.json"]
            .as_str()
            .is_some_and(|d| d.contains("\"panels\""))
    );
}

//! docs/openapi.yaml: valid, lists every error the services answer, and schemathesis finds no answer it does not describe.

use super::*;

/// The `x-error-codes` of an operation's responses, `$ref`s resolved: (status, code).
fn documented_errors(api: &Value, path: &str, method: &str) -> BTreeSet<(u16, String)> {
    let mut codes = BTreeSet::new();
    let responses = api["paths"][path][method]["responses"]
        .as_mapping()
        .unwrap_or_else(|| panic!("{method} {path}: no responses"));
    for (status, response) in responses {
        let status: u16 = str_of(status, "status").parse().expect("a status");
        let response = match response["$ref"].as_str() {
            Some(target) => {
                let name = target.rsplit('/').next().expect("a name");
                &api["components"]["responses"][name]
            }
            None => response,
        };
        for code in response["x-error-codes"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            codes.insert((status, str_of(code, "code").to_owned()));
        }
    }
    codes
}

/// docs/openapi.yaml is a valid OpenAPI 3.1 document (openapi-spec-validator), and its
/// error codes are the services' error enums, each on the endpoint that answers it, plus
/// the front's `service_unavailable`: nothing missing, nothing invented.
#[test]
fn the_openapi_document_is_valid_and_lists_every_error_the_services_answer() {
    let mut command = deploy_check("openapi-spec-validator");
    command.arg(repo().join("docs/openapi.yaml"));
    assert_accepts(command, "openapi-spec-validator", "docs/openapi.yaml");
    let api = documents("docs/openapi.yaml").remove(0);
    assert_eq!(api["openapi"], "3.1.0");
    let analytics = documented_errors(&api, "/api/v1/analytics", "post");
    let experiments = documented_errors(&api, "/api/v1/experiments", "get");
    let pairs = |items: Vec<(axum::http::StatusCode, &str)>| -> BTreeSet<(u16, String)> {
        items
            .into_iter()
            .map(|(status, code)| (status.as_u16(), code.to_owned()))
            .collect()
    };
    let ingest = pairs(
        ingest::error::IngestError::examples()
            .iter()
            .map(|e| e.status_and_code())
            .collect(),
    );
    let config_api = pairs(
        config_api::error::ConfigApiError::examples()
            .iter()
            .map(|e| e.status_and_code())
            .collect(),
    );
    let routes = pairs(
        http_kit::error::RouteError::examples()
            .iter()
            .map(|e| e.status_and_code())
            .filter(|(_, code)| *code != "not_found") // other paths, not these
            .collect(),
    );
    let front = BTreeSet::from([(503, "service_unavailable".to_owned())]);
    for (name, documented, answered) in [
        ("POST /api/v1/analytics", &analytics, &ingest),
        ("GET /api/v1/experiments", &experiments, &config_api),
    ] {
        let missing: Vec<_> = answered
            .iter()
            .chain(&front)
            .filter(|c| !documented.contains(*c))
            .collect();
        assert!(missing.is_empty(), "{name} does not document {missing:?}");
        let invented: Vec<_> = documented
            .iter()
            .filter(|c| !answered.contains(*c) && !routes.contains(*c) && !front.contains(*c))
            .collect();
        assert!(
            invented.is_empty(),
            "{name} documents {invented:?}, which nothing answers"
        );
    }
    let all: BTreeSet<_> = analytics.union(&experiments).cloned().collect();
    assert!(routes.is_subset(&all), "{:?}", routes.difference(&all));
}

/// schemathesis (PyPI) against the real ingest and config-api behind the real front, from
/// docs/openapi.yaml: a bounded number of generated requests per operation (deterministic),
/// and no answer may be a 5xx or differ from the document (status, content type, headers,
/// body schema).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_5xx_and_no_answer_the_document_does_not_describe() {
    let file = e2e::one_experiment_snapshot("pk_openapi");
    let topic = e2e::unique("openapi-");
    let ingest = e2e::start_ingest(e2e::ingest_config(&file.path, &topic, &[])).await;
    let config_api = e2e::start_config_api(&file.path).await;
    let front = e2e::Front::start(ingest.addr, config_api.addr).await;
    // Its reports and caches land in the working directory: a scratch one.
    let scratch = tempfile::tempdir().expect("folder");
    let mut command = deploy_check("schemathesis");
    command
        .current_dir(scratch.path())
        .arg("run")
        .arg(repo().join("docs/openapi.yaml"))
        .args(["--url", &front.url()])
        // A key of the snapshot, so that requests get past the key check.
        .args(["--header", "X-public-key: pk_openapi"])
        .args(["--max-examples", "25", "--generation-deterministic"])
        .args(["--request-timeout", "10", "--suppress-health-check", "all"])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_headers_conformance,response_schema_conformance",
        ])
        .env("NO_COLOR", "1");
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("joined")
        .expect("schemathesis runs (scripts/test installs it)");
    let report = String::from_utf8_lossy(&output.stdout);
    let summary: String = report
        .lines()
        .skip_while(|l| !l.contains("SUMMARY"))
        .collect::<Vec<_>>()
        .join("\n");
    eprintln!("{summary}");
    assert!(
        output.status.success(),
        "schemathesis:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(report.contains("Tested: 4"), "{summary}");
    assert!(!report.contains("Authentication failed"), "{summary}");

    drop(front);
    config_api.stop().await.expect("clean stop");
    ingest.stop().await.expect("clean stop");
}

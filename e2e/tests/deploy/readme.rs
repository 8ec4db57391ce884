//! The error table of docs/api.md is the services' error enums: every status and code they
//! can answer is in it, and it lists nothing else.

use std::collections::BTreeSet;

fn readme_errors() -> BTreeSet<(u16, String)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md");
    let readme = std::fs::read_to_string(path).expect("docs/api.md");
    let section = readme
        .split("### Errors")
        .nth(1)
        .and_then(|rest| rest.split("\n### ").next())
        .expect("an Errors section");
    let mut rows = BTreeSet::new();
    for line in section.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Ok(status) = cells[1].parse::<u16>() else {
            continue; // the header
        };
        for code in cells[2].split('`').skip(1).step_by(2) {
            rows.insert((status, code.to_owned()));
        }
    }
    rows
}

#[test]
fn the_readme_error_table_is_the_error_enums() {
    let mut answered = BTreeSet::new();
    let mut add = |(status, code): (axum::http::StatusCode, &str)| {
        answered.insert((status.as_u16(), code.to_owned()));
    };
    ingest::error::IngestError::examples()
        .iter()
        .for_each(|e| add(e.status_and_code()));
    config_api::error::ConfigApiError::examples()
        .iter()
        .for_each(|e| add(e.status_and_code()));
    http_kit::error::RouteError::examples()
        .iter()
        .for_each(|e| add(e.status_and_code()));
    assert_eq!(readme_errors(), answered);
}

//! The deploy README names only tables, settings, variables and flags that exist.

use super::*;

/// The binaries whose `--help` the docs may quote, by name.
const BINARIES: [&str; 8] = [
    "ingest",
    "consumer",
    "config-api",
    "dlq-replay",
    "experiment-results",
    "analytics-access",
    "analytics-gate",
    "analytics-erase",
];

/// A binary's command, with its subcommands.
fn command_of(binary: &str) -> clap::Command {
    match binary {
        "ingest" => ingest::Config::command(),
        "consumer" => consumer::Config::command(),
        "config-api" => config_api::Config::command(),
        "dlq-replay" => tools::ReplayConfig::command(),
        "experiment-results" => tools::plan::PlanConfig::command(),
        "analytics-access" => tools::access::AccessConfig::command(),
        "analytics-gate" => tools::gate::GateConfig::command(),
        "analytics-erase" => tools::erase::EraseConfig::command(),
        other => panic!("unknown binary {other}"),
    }
}

/// Every long flag of a command and its subcommands.
fn flags_of(command: &clap::Command, into: &mut BTreeSet<String>) {
    into.extend(
        command
            .get_arguments()
            .filter_map(|a| a.get_long())
            .map(|l| format!("--{l}")),
    );
    into.extend(["--help".to_owned(), "--version".to_owned()]);
    for sub in command.get_subcommands() {
        flags_of(sub, into);
    }
}

/// The text a name of the deploy docs must be found in: the schema's migrations, the
/// services' and kits' sources, and the deployment files themselves.
fn known_text() -> String {
    let mut text = String::new();
    let mut pending: Vec<PathBuf> = [
        "consumer/src",
        "kafka-kit/src",
        "http-kit/src",
        "ingest/src",
        "config-api/src",
        "tools/src",
        "deploy",
        "e2e/tests/k8s-schemas/package.json",
    ]
    .iter()
    .map(|d| repo().join(d))
    .collect();
    while let Some(dir) = pending.pop() {
        if dir.is_file() {
            text.push_str(&std::fs::read_to_string(&dir).unwrap_or_default());
            continue;
        }
        for entry in std::fs::read_dir(&dir).expect("folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|n| n != "README.md") {
                text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    for file in [
        "docker-compose.yml",
        "docker-compose.cluster.yml",
        "Dockerfile",
    ] {
        text.push_str(&read(file));
    }
    // librdkafka's properties (`KAFKA_PROPERTIES`), from the crate's bundled librdkafka.
    let lock = read("Cargo.lock");
    let version = lock
        .split("name = \"rdkafka-sys\"\nversion = \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("rdkafka-sys in Cargo.lock");
    let registry = Path::new(
        &std::env::var("CARGO_HOME")
            .unwrap_or_else(|_| format!("{}/.cargo", std::env::var("HOME").unwrap_or_default())),
    )
    .join("registry/src");
    let configuration = std::fs::read_dir(&registry)
        .expect("cargo's registry")
        .filter_map(|index| {
            let path = index
                .ok()?
                .path()
                .join(format!("rdkafka-sys-{version}/librdkafka/CONFIGURATION.md"));
            std::fs::read_to_string(path).ok()
        })
        .next()
        .expect("librdkafka's CONFIGURATION.md in cargo's registry");
    text.push_str(&configuration);
    text
}

/// The flags of `line` that the binary before them does not have.
fn unknown_flags(line: &str) -> Vec<String> {
    let mut unknown = Vec::new();
    let words: Vec<&str> = line.split_whitespace().collect();
    for (i, word) in words.iter().enumerate() {
        let binary = word.rsplit('/').next().unwrap_or(word);
        if !BINARIES.contains(&binary) {
            continue;
        }
        let mut flags = BTreeSet::new();
        flags_of(&command_of(binary), &mut flags);
        for flag in words[i + 1..].iter().take_while(|w| !BINARIES.contains(w)) {
            let flag = flag.split('=').next().unwrap_or(flag);
            if flag.starts_with("--") && !flags.contains(flag) {
                unknown.push(format!("{binary} has no {flag}"));
            }
        }
    }
    unknown
}

/// What in `doc` names something that does not exist: a variable no binary reads (nor
/// docker-compose), a flag a binary lacks, a file, or a table, setting or other name found
/// nowhere in the schema, the sources or the deployment files.
fn stale_names(doc: &str) -> Vec<String> {
    let mut variables = BTreeSet::new();
    for binary in BINARIES {
        variables.extend(settings_of(match binary {
            "experiment-results" | "analytics-access" | "analytics-gate" | "analytics-erase" => {
                "tools"
            }
            other => other,
        }));
    }
    let compose = format!(
        "{}{}",
        read("docker-compose.yml"),
        read("docker-compose.cluster.yml")
    );
    let known = known_text();
    let mut stale = Vec::new();
    let mut in_code = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            stale.extend(unknown_flags(line));
            continue;
        }
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 0 || span.is_empty() {
                continue;
            }
            stale.extend(unknown_flags(span));
            let name = span.trim();
            let is_variable = |name: &str| {
                name.len() > 2
                    && name
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                    && name.contains('_')
            };
            if name.contains('=') && !name.contains(' ') {
                // Settings (`KEY=value`, librdkafka's `a.b=c;d.e=f`): each key.
                for key in name.split(';').filter_map(|part| part.split('=').next()) {
                    let found = if is_variable(key) {
                        variables.contains(key)
                    } else {
                        known.contains(key)
                    };
                    if !found {
                        stale.push(format!("{key} (in {name}) is found nowhere"));
                    }
                }
            } else if is_variable(name) {
                if !variables.contains(name) && !compose.contains(&format!("${{{name}")) {
                    stale.push(format!("no binary reads {name}"));
                }
            } else if name.contains(' ') {
                // A command or a phrase: its flags were checked above.
            } else if (name.contains('/') && !name.starts_with('/') && !name.contains(':'))
                || [".yaml", ".yml", ".conf", ".json", ".xml"]
                    .iter()
                    .any(|e| name.ends_with(e))
            {
                let exists = [repo().join("deploy").join(name), repo().join(name)]
                    .iter()
                    .any(|p| p.exists());
                if !exists && !known.contains(name) {
                    stale.push(format!("no file {name}"));
                }
            } else {
                // A table, setting, path or other name: said somewhere real.
                let bare = name.strip_prefix("analytics.").unwrap_or(name);
                if !known.contains(bare) {
                    stale.push(format!("{name} is found nowhere"));
                }
            }
        }
    }
    stale
}

/// deploy/README.md, the operators' first page, names only what exists: each variable is
/// read by a binary (or by docker-compose), each flag is in its binary's `--help`, each
/// file exists, and each table, setting and other name is found in the schema, the sources
/// or the deployment files. The checker itself refuses what the page once said wrongly.
#[test]
fn the_deploy_readme_names_only_tables_settings_variables_and_flags_that_exist() {
    let stale = stale_names(&read("deploy/README.md"));
    assert!(stale.is_empty(), "deploy/README.md: {stale:#?}");
    let old = "a `Distributed` table `events_all`; set `CLICKHOUSE_TTL_MONTHS`; \
               run `consumer --migrate-schema`";
    let found = stale_names(old);
    assert_eq!(found.len(), 3, "{found:#?}");
    // The binaries it names answer --help.
    for binary in BINARIES {
        let mut command = command_of(binary);
        let help = command.render_long_help().to_string();
        assert!(help.contains("--help"), "{binary}");
    }
}

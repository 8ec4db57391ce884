//! The deployment files read as a reviewer would: they parse, every long-running service
//! has a health check, images are pinned, no environment variable is one the binaries do
//! not read, the nginx fronts pass `nginx -t`, Deployments have probes and resources, and
//! the Ingress routes both API paths.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use serde::Deserialize;
use serde_yaml::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every YAML document of a file, merge keys (`<<`) applied.
fn documents(path: &str) -> Vec<Value> {
    let text = read(path);
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            let mut value = Value::deserialize(doc).unwrap_or_else(|e| panic!("{path}: {e}"));
            value
                .apply_merge()
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            value
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// The ConfigMaps a kustomization or component in `dir` generates (`configMapGenerator`
/// with `envs`), as kustomize reads an env file, named without the content hash kubectl
/// adds (`kubernetes::settings_changes_roll_the_pods` checks that hash).
fn generated_config_maps(dir: &str, kustomization: &Value) -> Vec<Value> {
    let Some(generators) = kustomization["configMapGenerator"].as_sequence() else {
        return Vec::new();
    };
    generators
        .iter()
        .map(|generator| {
            let mut data = serde_yaml::Mapping::new();
            for file in generator["envs"].as_sequence().expect("envs") {
                let path = format!("{dir}/{}", str_of(file, "env file"));
                for line in read(&path).lines().map(str::trim) {
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    let (key, value) = line
                        .split_once('=')
                        .unwrap_or_else(|| panic!("{path}: `{line}` is no KEY=value"));
                    data.insert(key.into(), value.into());
                }
            }
            let mut map = serde_yaml::Mapping::new();
            map.insert("apiVersion".into(), "v1".into());
            map.insert("kind".into(), "ConfigMap".into());
            let mut metadata = serde_yaml::Mapping::new();
            metadata.insert("name".into(), generator["name"].clone());
            map.insert("metadata".into(), metadata.into());
            map.insert("data".into(), data.into());
            Value::Mapping(map)
        })
        .collect()
}

/// A copy of a folder, links replaced by what they point at.
fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("folder");
    for entry in std::fs::read_dir(from).expect("folder") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("name"));
        if path.is_dir() {
            copy_folder(&path, &target);
        } else {
            std::fs::copy(&path, &target).expect("copied");
        }
    }
}

/// What `kubectl kustomize` builds of a folder; `None` where kubectl is not installed
/// (scripts/test does not install it).
fn kubectl_kustomize(dir: &Path) -> Option<Vec<Value>> {
    let output = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .ok()?;
    assert!(
        output.status.success(),
        "kubectl kustomize {dir:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    Some(
        serde_yaml::Deserializer::from_str(&text)
            .map(|doc| Value::deserialize(doc).expect("YAML"))
            .filter(|v| !v.is_null())
            .collect(),
    )
}

/// A generated ConfigMap's name without the hash suffix kustomize adds (`-` and ten
/// letters or digits); any other name as it is.
fn unhashed(name: &str) -> String {
    match name.rsplit_once('-') {
        Some((stem, hash))
            if name.starts_with("ConfigMap ")
                && hash.len() == 10
                && hash.bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            stem.to_owned()
        }
        _ => name.to_owned(),
    }
}

/// The `env` entry named `name` of a container of a manifest, if it has one.
fn env_var<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_sequence()?
        .iter()
        .find(|e| e["name"] == name)
}

/// The environment variables a binary reads: its declared settings (those of its
/// subcommands too), plus logging. `tools` is the tools image: any of its four commands.
fn settings_of(binary: &str) -> BTreeSet<String> {
    let commands = match binary {
        "ingest" => vec![ingest::Config::command()],
        "consumer" => vec![consumer::Config::command()],
        "config-api" => vec![config_api::Config::command()],
        "dlq-replay" => vec![tools::ReplayConfig::command()],
        "tools" => vec![
            tools::ReplayConfig::command(),
            tools::access::AccessConfig::command(),
            tools::erase::EraseConfig::command(),
            tools::plan::PlanConfig::command(),
        ],
        other => panic!("unknown binary {other}"),
    };
    fn envs(command: &clap::Command, into: &mut BTreeSet<String>) {
        into.extend(
            command
                .get_arguments()
                .filter_map(|a| a.get_env())
                .map(|e| e.to_string_lossy().into_owned()),
        );
        for sub in command.get_subcommands() {
            envs(sub, into);
        }
    }
    let mut known: BTreeSet<String> = ["RUST_LOG", "LOG_FORMAT"].map(String::from).into();
    for command in &commands {
        envs(command, &mut known);
    }
    known
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v:?}"))
}

/// Runs a checker (installed by scripts/test) and fails with its complaint.
fn assert_accepts(mut command: std::process::Command, checker: &str, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{checker} does not run (scripts/test installs it): {e}"));
    assert!(
        output.status.success(),
        "{checker} refused {what}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A checker of the virtual environment scripts/test installs (kubernetes-validate and
/// openapi-spec-validator, from PyPI).
fn deploy_check(tool: &str) -> std::process::Command {
    let bin = std::env::var("TEST_DEPLOY_CHECKS_BIN").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!(
            "{home}/.local/share/deploy-checks-kubernetes-validate-1.37.0-openapi-spec-validator-0.9.0-schemathesis-4.32.5/bin"
        )
    });
    std::process::Command::new(Path::new(&bin).join(tool))
}

mod compose;
mod dockerfile;
mod docs;
mod kubernetes;
mod monitoring;
mod nginx;
mod openapi;
mod operators;
mod readme;
mod readme_names;
mod scripts;

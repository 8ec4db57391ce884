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

/// The environment variables a binary reads: its declared settings, plus logging.
fn settings_of(binary: &str) -> BTreeSet<String> {
    let command = match binary {
        "ingest" => ingest::Config::command(),
        "consumer" => consumer::Config::command(),
        "config-api" => config_api::Config::command(),
        "dlq-replay" => tools::ReplayConfig::command(),
        other => panic!("unknown binary {other}"),
    };
    command
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .chain(["RUST_LOG", "LOG_FORMAT"].map(String::from))
        .collect()
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v:?}"))
}

#[test]
fn compose_services_are_healthchecked_pinned_and_configured_with_real_settings() {
    let docs = documents("docker-compose.yml");
    check_compose_services(&docs[0]);
}

/// The cluster override, merged over the base file by docker-compose itself: the same
/// rules, four ClickHouse servers, and every configuration file it mounts exists.
#[test]
fn compose_cluster_override_merges_into_a_checked_cluster() {
    let merged: Value =
        serde_yaml::from_slice(&e2e::compose_cluster_config()).expect("merged YAML");
    check_compose_services(&merged);
    let services = merged["services"].as_mapping().expect("services");
    let servers = services
        .iter()
        .filter(|(_, s)| str_of(&s["image"], "image").starts_with("clickhouse/clickhouse-server"))
        .count();
    assert_eq!(servers, 4, "two shards of two replicas");
    let consumer = &merged["services"]["consumer"]["environment"];
    assert_eq!(
        str_of(&consumer["CLICKHOUSE_CLUSTER"], "cluster"),
        "analytics"
    );
    let shards: Vec<usize> = str_of(&consumer["CLICKHOUSE_URL"], "url")
        .split(';')
        .map(|s| s.split(',').count())
        .collect();
    assert_eq!(shards, [2, 2]);
    // docker-compose v1 writes `source:target:mode`, a bind mount's source absolute.
    let mut mounts = 0;
    for (name, service) in services {
        for volume in service["volumes"].as_sequence().into_iter().flatten() {
            let source = str_of(volume, "volume")
                .split(':')
                .next()
                .unwrap_or_default();
            if source.starts_with('/') {
                mounts += 1;
                assert!(
                    Path::new(source).exists(),
                    "{}: {source} does not exist",
                    str_of(name, "service")
                );
            }
        }
    }
    assert!(
        mounts >= 9,
        "the servers' and Keeper's files are mounted ({mounts})"
    );
}

fn check_compose_services(compose: &Value) {
    let services = compose["services"].as_mapping().expect("services");
    let mut ours = 0;
    for (name, service) in services {
        let name = str_of(name, "service name");
        assert!(
            service["healthcheck"]["test"].is_sequence(),
            "service {name} has no healthcheck"
        );
        let image = str_of(&service["image"], "image");
        if service["build"]["target"] == "sdk" {
            // The front: nginx and the browser SDK, no binary of ours.
            assert!(service["command"].is_null(), "{name}: a command for nginx");
        } else if service.get("build").is_some() {
            ours += 1;
            let binary = str_of(&service["command"][0], "command");
            let known = settings_of(binary);
            let env = service["environment"].as_mapping().expect("environment");
            for key in env.keys() {
                let key = str_of(key, "variable");
                assert!(known.contains(key), "{name}: {key} is not read by {binary}");
            }
        } else {
            let (_, tag) = image
                .rsplit_once(':')
                .unwrap_or_else(|| panic!("{image} has no tag"));
            assert!(
                tag != "latest" && !tag.is_empty(),
                "{name}: {image} is not pinned"
            );
            assert!(tag.contains('.'), "{name}: {image} names no version");
        }
        if let Some(deps) = service.get("depends_on") {
            for (dep, condition) in deps.as_mapping().expect("depends_on map") {
                assert_eq!(
                    str_of(&condition["condition"], "condition"),
                    "service_healthy",
                    "{name} waits for {dep:?} without a health condition"
                );
            }
        }
    }
    assert_eq!(
        ours, 3,
        "ingest, consumer and config-api are built from the Dockerfile"
    );
}

#[test]
fn compose_file_passes_docker_compose_config() {
    // docker-compose validates the file against its schema without a Docker engine.
    let mut command = std::process::Command::new("docker-compose");
    command
        .arg("--project-directory")
        .arg(repo())
        .arg("-f")
        .arg(repo().join("docker-compose.yml"))
        .args(["config", "-q"]);
    command
        .env("CLICKHOUSE_PASSWORD", "compose-check")
        .env("CLICKHOUSE_OPERATOR_PASSWORD", "compose-operator");
    // No ClickHouse without either password: never a passwordless user.
    for missing in ["CLICKHOUSE_PASSWORD", "CLICKHOUSE_OPERATOR_PASSWORD"] {
        let mut without = std::process::Command::new("docker-compose");
        without.args(command.get_args());
        for (name, value) in command.get_envs() {
            if let Some(value) = value.filter(|_| name != missing) {
                without.env(name, value);
            }
        }
        let refused = without
            .env_remove(missing)
            .output()
            .expect("docker-compose runs");
        assert!(!refused.status.success(), "composed without {missing}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains(missing),
            "{}",
            String::from_utf8_lossy(&refused.stderr)
        );
    }
    assert_accepts(command, "docker-compose config", "docker-compose.yml");
}

#[test]
fn scripts_parse_and_are_executable() {
    use std::os::unix::fs::PermissionsExt;
    for name in ["up", "down", "test", "bench", "chaos", "lib.sh"] {
        let path = repo().join("scripts").join(name);
        let mut command = std::process::Command::new("bash");
        command.arg("-n").arg(&path);
        assert_accepts(command, "bash -n", &format!("scripts/{name}"));
        let mode = std::fs::metadata(&path)
            .expect("script")
            .permissions()
            .mode();
        assert!(
            name.ends_with(".sh") || mode & 0o111 != 0,
            "scripts/{name} is not executable"
        );
    }
}

/// Every script answers `--help` (and `-h`) with its usage and exit 0, and refuses an
/// unknown option with exit 2, touching nothing either way: it runs with a PATH that holds
/// only bash, dirname and sed and a HOME of its own, so any command it tried to run
/// (mkdir, cargo, nginx, kill, apt-get...) would fail it.
#[test]
fn every_script_answers_help_and_refuses_unknown_options_touching_nothing() {
    let bare = tempfile::tempdir().expect("temporary folder");
    let bin = bare.path().join("bin");
    std::fs::create_dir(&bin).expect("folder");
    for tool in ["bash", "dirname", "sed"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|dir| Path::new(dir).join(tool))
            .find(|path| path.exists())
            .unwrap_or_else(|| panic!("{tool} not found"));
        std::os::unix::fs::symlink(found, bin.join(tool)).expect("symlink");
    }
    let run = |script: &Path, arg: &str| {
        std::process::Command::new(bin.join("bash"))
            .arg(script)
            .arg(arg)
            .env_clear()
            .env("PATH", &bin)
            .env("HOME", bare.path())
            .output()
            .expect("bash runs")
    };
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(repo().join("scripts"))
        .expect("scripts/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_none())
        .collect();
    scripts.sort();
    assert!(scripts.len() >= 5, "{scripts:?}");
    for script in &scripts {
        let name = script.file_name().expect("name").to_string_lossy();
        for help in ["--help", "-h"] {
            let output = run(script, help);
            let usage = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success() && usage.lines().count() >= 2,
                "scripts/{name} {help}: exit {:?}, usage {usage:?}, errors {}",
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let output = run(script, "--no-such-option");
        assert_eq!(
            output.status.code(),
            Some(2),
            "scripts/{name} --no-such-option: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("--help"),
            "scripts/{name}: the refusal points to --help"
        );
    }
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

fn nginx_check(name: &str, conf: &str) {
    let dir = tempfile::tempdir().expect("folder");
    let path = dir.path().join(name);
    std::fs::write(&path, conf).expect("conf written");
    let mut command = std::process::Command::new("nginx");
    command
        .arg("-t")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&path);
    assert_accepts(command, "nginx -t", name);
}

/// A server block of a container's nginx (`/etc/nginx/X` mounted from `deploy/nginx/X`),
/// its upstreams' service names mapped to loopback, as a whole configuration run from `dir`.
fn container_nginx(file: &str, dir: &std::path::Path) -> String {
    let mut server = read(&format!("deploy/nginx/{file}"))
        .replace("ingest:8081", "127.0.0.1:8081")
        .replace("config-api:8082", "127.0.0.1:8082");
    for include in ["routes.conf", "sdk-headers.conf"] {
        let path = repo().join("deploy/nginx").join(include);
        server = server.replace(
            &format!("/etc/nginx/{include}"),
            &path.display().to_string(),
        );
    }
    format!(
        "pid {0}/{file}.pid;\nerror_log {0}/error.log;\nevents {{}}\nhttp {{\n{server}\n}}\n",
        dir.display()
    )
}

#[test]
fn every_nginx_front_passes_nginx_t() {
    let dir = tempfile::tempdir().expect("folder");
    // docker-compose's front, and the SDK's own server of the Dockerfile's `sdk` image.
    for file in ["compose.conf", "sdk.conf"] {
        nginx_check(file, &container_nginx(file, dir.path()));
    }
    // scripts/up's front (which creates its temp folder first, as scripts/up does).
    std::fs::create_dir_all(dir.path().join("tmp")).expect("folder");
    let local = e2e::render_front(
        dir.path(),
        "127.0.0.1:8080",
        "127.0.0.1:8081",
        "127.0.0.1:8082",
    );
    nginx_check("local.conf", &local);
}

/// What the Dockerfile copies from the repository exists, and its last stage, the one a
/// plain `docker build` makes, is the services' image.
#[test]
fn the_dockerfile_copies_what_exists_and_builds_the_services_by_default() {
    let dockerfile = read("Dockerfile");
    let mut stages = Vec::new();
    for line in dockerfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first() {
            Some(&"FROM") => stages.push(words.last().copied().unwrap_or_default()),
            Some(&"COPY") if !line.contains("--from=") => {
                // Sources, then the destination; `.` is the whole context.
                for source in &words[1..words.len() - 1] {
                    let source = source.trim_end_matches('\\');
                    if !source.is_empty() && !source.starts_with("--") {
                        assert!(repo().join(source).exists(), "COPY {source}: no such file");
                    }
                }
            }
            _ => {}
        }
    }
    assert!(stages.contains(&"sdk"), "no sdk stage: {stages:?}");
    assert_eq!(stages.last(), Some(&"runtime"), "{stages:?}");
}

/// ConfigMaps of deploy/k8s by name: their keys.
fn config_maps(docs: &[Value]) -> BTreeMap<String, Vec<String>> {
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

#[test]
fn kubernetes_manifests_have_probes_resources_real_settings_and_every_path() {
    let kustomization = documents("deploy/k8s/kustomization.yaml");
    let files: Vec<String> = kustomization[0]["resources"]
        .as_sequence()
        .expect("resources")
        .iter()
        .map(|r| format!("deploy/k8s/{}", str_of(r, "resource")))
        .collect();
    let docs: Vec<Value> = files.iter().flat_map(|f| documents(f)).collect();
    let maps = config_maps(&docs);

    let mut deployments = BTreeSet::new();
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let name = str_of(&d["metadata"]["name"], "name").to_owned();
        let containers = d["spec"]["template"]["spec"]["containers"]
            .as_sequence()
            .expect("containers");
        for c in containers {
            for probe in ["readinessProbe", "livenessProbe"] {
                assert!(
                    c[probe]["httpGet"]["path"].is_string(),
                    "{name}: no {probe}"
                );
            }
            for kind in ["requests", "limits"] {
                let r = &c["resources"][kind];
                assert!(
                    r["cpu"].as_str().is_some() && r["memory"].as_str().is_some(),
                    "{name}: no {kind}"
                );
            }
            // The SDK's nginx has no settings of ours; the others name their binary.
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
        deployments.insert(name);
    }
    assert_eq!(
        deployments,
        BTreeSet::from([
            "config-api".into(),
            "consumer".into(),
            "ingest".into(),
            "sdk".into()
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
    let paths: BTreeMap<String, String> = docs
        .iter()
        .filter(|d| d["kind"] == "Ingress")
        .flat_map(|d| d["spec"]["rules"].as_sequence().expect("rules").clone())
        .flat_map(|rule| rule["http"]["paths"].as_sequence().expect("paths").clone())
        .map(|p| {
            let service = str_of(&p["backend"]["service"]["name"], "backend");
            (str_of(&p["path"], "path").to_owned(), service.to_owned())
        })
        .collect();
    for path in [
        "/api/v1/analytics",
        "/api/v1/experiments",
        "/sdk/v1/split.min.js",
        "/sdk/v1/split-autotrack.min.js",
    ] {
        let service = paths
            .get(path)
            .unwrap_or_else(|| panic!("the Ingress misses {path}"));
        assert!(services.contains(service), "{path} goes to no Service");
    }
    for kind in ["HorizontalPodAutoscaler", "PodDisruptionBudget", "Service"] {
        assert!(docs.iter().any(|d| d["kind"] == kind), "no {kind}");
    }
}

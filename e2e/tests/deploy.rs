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

/// Long-running services have a health check and wait for what they need to be healthy;
/// a one-shot service (`restart: "no"`: the migrations) is waited for until it completed;
/// a service of a profile (the tools) runs only on demand. Images are pinned, and every
/// variable of ours is one the binary reads.
fn check_compose_services(compose: &Value) {
    let services = compose["services"].as_mapping().expect("services");
    let one_shot = |name: &Value| services[name]["restart"] == "no";
    let mut ours = BTreeSet::new();
    for (name, service) in services {
        let on_demand = service.get("profiles").is_some();
        let name = str_of(name, "service name");
        assert!(
            service["healthcheck"]["test"].is_sequence() || one_shot(&name.into()) || on_demand,
            "service {name} has no healthcheck"
        );
        let image = str_of(&service["image"], "image");
        let target = service["build"]["target"].as_str();
        if target == Some("front") {
            // The front: nginx and the browser SDK, no binary of ours.
            assert!(service["command"].is_null(), "{name}: a command for nginx");
        } else if service.get("build").is_some() {
            let binary = if target == Some("tools") {
                "tools"
            } else {
                str_of(&service["command"][0], "command")
            };
            ours.insert(format!("{name}: {binary}"));
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
                let want = if one_shot(dep) {
                    "service_completed_successfully"
                } else {
                    "service_healthy"
                };
                assert_eq!(
                    str_of(&condition["condition"], "condition"),
                    want,
                    "{name} waits for {dep:?}"
                );
            }
        }
        // Published ports listen on this host's loopback only.
        for port in service["ports"].as_sequence().into_iter().flatten() {
            let port = match port {
                Value::String(text) => text.clone(),
                other => format!(
                    "{}:{}",
                    other["host_ip"].as_str().unwrap_or(""),
                    other["published"]
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| other["published"].as_u64().unwrap_or(0).to_string())
                ),
            };
            assert!(
                port.starts_with("127.0.0.1:"),
                "{name} publishes {port} beyond loopback"
            );
        }
    }
    assert_eq!(
        ours,
        BTreeSet::from([
            "config-api: config-api".into(),
            "consumer: consumer".into(),
            "ingest: ingest".into(),
            "migrate: consumer".into(),
            "tools: tools".into(),
        ]),
        "the services and tools built from the Dockerfile"
    );
    // The migrations run on their own, before the consumer starts.
    assert_eq!(
        services["migrate"]["command"],
        serde_yaml::from_str::<Value>("[consumer, --migrate-only]").expect("YAML")
    );
    assert_eq!(
        services["consumer"]["depends_on"]["migrate"]["condition"],
        "service_completed_successfully"
    );
    assert_eq!(
        services["migrate"]["environment"],
        {
            let mut consumer = services["consumer"]["environment"].clone();
            let map = consumer.as_mapping_mut().expect("environment");
            map.retain(|k, _| k.as_str().is_some_and(|k| k.starts_with("CLICKHOUSE_")));
            consumer
        },
        "the migrations reach the consumer's ClickHouse as its user"
    );
}

/// The snapshot is mounted by its directory, so that a file replaced by rename (an editor's
/// save, `sed -i`, `git checkout`) is seen in the container; ClickHouse's native and HTTP
/// ports are on the host's loopback, where the analysts' `clickhouse-client` looks.
#[test]
fn compose_mounts_the_snapshot_s_directory_and_publishes_clickhouse_on_loopback() {
    let docs = documents("docker-compose.yml");
    let services = docs[0]["services"].as_mapping().expect("services");
    let mut watched = 0;
    for (name, service) in services {
        let Some(snapshot) = service["environment"]["EXPERIMENTS_SNAPSHOT"].as_str() else {
            continue;
        };
        let name = str_of(name, "service");
        let mounts: Vec<(&str, &str)> = service["volumes"]
            .as_sequence()
            .expect("volumes")
            .iter()
            .filter_map(|v| {
                let mut parts = str_of(v, "volume").split(':');
                Some((parts.next()?, parts.next()?))
            })
            .collect();
        let (source, target) = mounts
            .iter()
            .find(|(_, target)| snapshot.starts_with(&format!("{target}/")))
            .unwrap_or_else(|| panic!("{name}: no directory mounted above {snapshot}"));
        let on_host = repo().join(source);
        assert!(on_host.is_dir(), "{name}: {source} is not a directory");
        let file = on_host.join(&snapshot[target.len() + 1..]);
        assert!(file.is_file(), "{name}: {} does not exist", file.display());
        assert!(
            !mounts.iter().any(|(_, target)| *target == snapshot),
            "{name}: the snapshot file itself is mounted"
        );
        watched += 1;
    }
    assert_eq!(
        watched, 3,
        "ingest, config-api and consumer read the snapshot"
    );
    let ports: Vec<&str> = docs[0]["services"]["clickhouse"]["ports"]
        .as_sequence()
        .expect("ports")
        .iter()
        .map(|p| str_of(p, "port"))
        .collect();
    for port in ["127.0.0.1:8123:8123", "127.0.0.1:9000:9000"] {
        assert!(
            ports.contains(&port),
            "ClickHouse does not publish {port}: {ports:?}"
        );
    }
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
    // Rendered into the front image by the Dockerfile, the same way.
    let versioned = read("deploy/nginx/sdk-versioned.conf.in")
        .replace("@SDK_DIST@", &repo().join("sdk/dist").display().to_string())
        .replace(
            "@SDK_HEADERS@",
            &repo()
                .join("deploy/nginx/sdk-headers.conf")
                .display()
                .to_string(),
        );
    std::fs::write(dir.join("sdk-versioned.conf"), versioned).expect("written");
    server = server.replace(
        "/etc/nginx/sdk-versioned*.conf",
        &dir.join("sdk-versioned*.conf").display().to_string(),
    );
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
    // The front image serves the SDK's versioned path too (nginx -T shows what it loads).
    let conf = dir.path().join("front.conf");
    std::fs::write(&conf, container_nginx("compose.conf", dir.path())).expect("written");
    let dump = std::process::Command::new("nginx")
        .arg("-T")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("nginx runs");
    let dump = String::from_utf8_lossy(&dump.stdout);
    let versioned = read("deploy/nginx/sdk-versioned.conf.in");
    let location = versioned
        .lines()
        .find(|l| l.starts_with("location = "))
        .expect("a location");
    assert!(
        dump.contains(location),
        "the front misses the SDK's versioned path ({location})"
    );
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

/// The images an operator runs: the services (default), the tools with the four commands
/// (no cargo needed), the front and the SDK on a non-root nginx; each with OCI labels; the
/// SDK built on a supported Node (22 LTS).
#[test]
fn the_dockerfile_builds_the_tools_a_non_root_front_and_labelled_images() {
    let dockerfile = read("Dockerfile");
    // Stage name → its lines (continuations joined).
    let mut stages: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    let mut current = String::new();
    let joined = dockerfile.replace("\\\n", " ");
    for line in joined.lines().map(str::trim) {
        if let Some(from) = line.strip_prefix("FROM ") {
            let words: Vec<&str> = from.split_whitespace().collect();
            current = words.last().copied().unwrap_or_default().to_owned();
            stages.insert(current.clone(), (words[0].to_owned(), vec![]));
        } else if let Some((_, lines)) = stages.get_mut(&current) {
            lines.push(line.to_owned());
        }
    }
    let stage = |name: &str| {
        stages
            .get(name)
            .unwrap_or_else(|| panic!("no stage {name}: {:?}", stages.keys()))
    };
    assert!(
        stage("sdk-build").0.starts_with("node:22"),
        "{}",
        stage("sdk-build").0
    );
    assert!(
        stage("sdk").0.starts_with("nginxinc/nginx-unprivileged:"),
        "{}",
        stage("sdk").0
    );
    assert_eq!(stage("front").0, "sdk", "the front is the SDK's nginx");
    let text = |name: &str| stage(name).1.join("\n");
    assert!(text("front").contains("routes.conf /etc/nginx/routes.conf"));
    for tool in [
        "experiment-results",
        "analytics-access",
        "analytics-erase",
        "dlq-replay",
    ] {
        assert!(
            text("builder").contains(&format!("--bin {tool}")),
            "{tool} is not built"
        );
        assert!(
            text("tools").contains(&format!("/src/target/dist/{tool}")),
            "{tool} is not in the tools image"
        );
    }
    for name in ["runtime", "tools"] {
        assert!(text(name).contains("USER 10001"), "{name} runs as root");
    }
    for name in ["runtime", "tools", "sdk", "front"] {
        for label in [
            "org.opencontainers.image.title",
            "org.opencontainers.image.description",
        ] {
            assert!(text(name).contains(label), "{name}: no {label}");
        }
    }
    for name in ["runtime", "tools", "sdk"] {
        for label in [
            "org.opencontainers.image.version",
            "org.opencontainers.image.licenses",
        ] {
            assert!(text(name).contains(label), "{name}: no {label}");
        }
    }
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

/// The manifests `kubectl apply -k deploy/k8s` applies, in its order.
fn k8s_documents() -> Vec<Value> {
    let kustomization = documents("deploy/k8s/kustomization.yaml");
    kustomization[0]["resources"]
        .as_sequence()
        .expect("resources")
        .iter()
        .flat_map(|r| documents(&format!("deploy/k8s/{}", str_of(r, "resource"))))
        .collect()
}

fn name_of(doc: &Value) -> String {
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
fn containers(pod: &Value) -> Vec<&Value> {
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
    // The same database, user and password as the consumer.
    assert_eq!(container["image"], consumer["image"]);
    let clickhouse =
        serde_yaml::from_str::<Value>("{configMapRef: {name: clickhouse-settings}}").expect("YAML");
    assert!(
        container["envFrom"]
            .as_sequence()
            .expect("envFrom")
            .contains(&clickhouse)
    );
    let password = |c: &Value| {
        c["env"]
            .as_sequence()
            .expect("env")
            .iter()
            .find(|e| e["name"] == "CLICKHOUSE_PASSWORD")
            .cloned()
    };
    assert_eq!(password(container), password(consumer));
    assert!(password(container).is_some());

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
fn validate_custom_resources(docs: &[Value]) -> (bool, String) {
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

/// The documents of the files a kustomization of deploy/k8s lists as its `resources`, read
/// as kustomize reads them (the operators' folder lists files only).
fn kustomization_files(dir: &str) -> Vec<Value> {
    let kustomization = documents(&format!("{dir}/kustomization.yaml"));
    assert_eq!(kustomization[0]["kind"], "Kustomization");
    kustomization[0]["resources"]
        .as_sequence()
        .expect("resources")
        .iter()
        .flat_map(|r| documents(&format!("{dir}/{}", str_of(r, "resource"))))
        .collect()
}

/// The base's manifests with a component of deploy/k8s turned on: its patches of
/// ConfigMaps merged key by key into their `data`, as kustomize's strategic merge does.
fn with_component(mut docs: Vec<Value>, component: &str) -> Vec<Value> {
    let dir = format!("deploy/k8s/{component}");
    let kustomization = documents(&format!("{dir}/kustomization.yaml"));
    assert_eq!(kustomization[0]["kind"], "Component");
    for patch in kustomization[0]["patches"].as_sequence().expect("patches") {
        for doc in documents(&format!("{dir}/{}", str_of(&patch["path"], "patch path"))) {
            assert_eq!(
                doc["kind"], "ConfigMap",
                "{component}: only ConfigMaps merged here"
            );
            let target = docs
                .iter_mut()
                .find(|d| {
                    d["kind"] == "ConfigMap" && d["metadata"]["name"] == doc["metadata"]["name"]
                })
                .unwrap_or_else(|| panic!("{component}: {} patches nothing", name_of(&doc)));
            let data = target["data"].as_mapping_mut().expect("data");
            for (key, value) in doc["data"].as_mapping().expect("data") {
                data.insert(key.clone(), value.clone());
            }
        }
    }
    docs
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

/// deploy/k8s/operators: Kafka run by Strimzi (KRaft, one node pool of three, the topics)
/// and ClickHouse by the Altinity operator (2 shards of 2 replicas, its Keeper), each
/// resource passing its CRD's schema and a broken copy of each kind refused; the base's
/// component `operators/settings` points the services at the Services those resources
/// produce, with topic creation off, and the NetworkPolicies let each service reach them.
#[test]
fn the_operators_kafka_and_clickhouse_pass_their_crds_and_are_where_the_services_look() {
    let operators = kustomization_files("deploy/k8s/operators");
    let base = k8s_documents();
    let pipeline = with_component(base.clone(), "operators/settings");
    assert!(read("deploy/k8s/kustomization.yaml").contains("\n#   - operators/settings\n"));

    // kustomize itself, where kubectl is installed, builds the same: the operators' folder,
    // and the base with the component turned on (in a copy).
    let dir = tempfile::tempdir().expect("folder");
    let copy = dir.path().join("k8s");
    copy_folder(&repo().join("deploy/k8s"), &copy);
    let kustomization = read("deploy/k8s/kustomization.yaml")
        .replace("\n# components:\n", "\ncomponents:\n")
        .replace("\n#   - operators/settings\n", "\n  - operators/settings\n");
    std::fs::write(copy.join("kustomization.yaml"), kustomization).expect("written");
    match (
        kubectl_kustomize(&copy.join("operators")),
        kubectl_kustomize(&copy),
    ) {
        (Some(built_operators), Some(built_pipeline)) => {
            let by_name = |docs: &[Value]| -> BTreeMap<String, Value> {
                docs.iter().map(|d| (name_of(d), d.clone())).collect()
            };
            assert_eq!(by_name(&built_operators), by_name(&operators));
            let (built, read) = (by_name(&built_pipeline), by_name(&pipeline));
            assert_eq!(
                built.keys().collect::<Vec<_>>(),
                read.keys().collect::<Vec<_>>()
            );
            for (name, doc) in read.iter().filter(|(_, d)| d["kind"] == "ConfigMap") {
                assert_eq!(built[name]["data"], doc["data"], "{name}");
            }
        }
        _ => eprintln!("no kubectl: the manifests are read from the kustomizations only"),
    }

    // Every custom resource passes its CRD's schema (e2e/tests/k8s-schemas/crds) ...
    let kinds: BTreeSet<&str> = operators
        .iter()
        .map(|d| str_of(&d["kind"], "kind"))
        .collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ClickHouseInstallation",
            "ClickHouseKeeperInstallation",
            "Kafka",
            "KafkaNodePool",
            "KafkaTopic",
        ])
    );
    let (accepted, report) = validate_custom_resources(&operators);
    assert!(accepted, "{report}");
    assert_eq!(
        report.matches("valid: ").count(),
        operators.len(),
        "{report}"
    );
    // ... and a broken copy of each kind fails, for the reason given.
    let of_kind =
        |kind: &str| -> Vec<&Value> { operators.iter().filter(|d| d["kind"] == kind).collect() };
    let breakages: [(&str, &str, &str, Value, &str); 6] = [
        (
            "Kafka",
            "/spec/kafka/listeners/0",
            "tsl",
            false.into(),
            "(tsl)",
        ),
        ("KafkaNodePool", "/spec", "replica", 3.into(), "(replica)"),
        (
            "KafkaNodePool",
            "/spec/roles",
            "0",
            "zookeeper".into(),
            "allowed values",
        ),
        (
            "KafkaTopic",
            "/spec",
            "partitions",
            "12".into(),
            "must be integer",
        ),
        (
            "ClickHouseInstallation",
            "/spec/configuration",
            "cluster",
            Value::Null,
            "(cluster)",
        ),
        (
            "ClickHouseKeeperInstallation",
            "/spec/configuration/clusters/0/layout",
            "replicaCount",
            3.into(),
            "(replicaCount)",
        ),
    ];
    let mut broken = vec![];
    for (kind, at, field, value, _) in &breakages {
        let mut doc = of_kind(kind)[0].clone();
        let mut node = &mut doc;
        for step in at.split('/').skip(1) {
            node = match step.parse::<usize>() {
                Ok(i) => &mut node[i],
                Err(_) => &mut node[step],
            };
        }
        match field.parse::<usize>() {
            Ok(i) => node[i] = value.clone(),
            Err(_) => node[*field] = value.clone(),
        }
        broken.push(doc);
    }
    // One line of report per document, in their order.
    let (accepted, report) = validate_custom_resources(&broken);
    assert!(!accepted, "{report}");
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), breakages.len(), "{report}");
    for ((kind, at, field, _, why), line) in breakages.iter().zip(lines) {
        assert!(
            line.starts_with("INVALID: ")
                && line.contains(&format!(" {kind} "))
                && line.contains(why),
            "{kind} with {at}/{field}: {line}"
        );
    }

    let setting = |map: &str, key: &str| -> String {
        let doc = pipeline
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == map)
            .unwrap_or_else(|| panic!("no ConfigMap {map}"));
        str_of(&doc["data"][key], key).to_owned()
    };
    let number = |map: &str, key: &str| -> u64 {
        setting(map, key)
            .parse()
            .unwrap_or_else(|e| panic!("{key}: {e}"))
    };
    let namespace = |d: &Value| str_of(&d["metadata"]["namespace"], "namespace").to_owned();
    let one = |kind: &str| -> &Value {
        let all = of_kind(kind);
        assert_eq!(all.len(), 1, "one {kind}");
        all[0]
    };

    // Kafka in KRaft mode: one node pool of the Kafka, three nodes each a controller and a
    // broker (a quorum of three, a broker for each of the topics' replicas).
    let kafka = one("Kafka");
    let kafka_name = str_of(&kafka["metadata"]["name"], "name");
    let kafka_namespace = namespace(kafka);
    assert!(kafka["spec"]["zookeeper"].is_null(), "KRaft, no ZooKeeper");
    let pool = one("KafkaNodePool");
    assert_eq!(pool["metadata"]["labels"]["strimzi.io/cluster"], kafka_name);
    assert_eq!(namespace(pool), kafka_namespace);
    assert_eq!(pool["spec"]["replicas"].as_u64(), Some(3));
    assert_eq!(
        pool["spec"]["roles"],
        serde_yaml::from_str::<Value>("[controller, broker]").expect("YAML")
    );
    let replication = number("kafka-settings", "KAFKA_REPLICATION_FACTOR");
    assert!(replication <= 3, "more replicas than brokers");
    let config = &kafka["spec"]["kafka"]["config"];
    assert!(
        config["min.insync.replicas"]
            .as_u64()
            .is_some_and(|min| min < replication),
        "a broker down stops the writes"
    );
    assert_eq!(config["auto.create.topics.enable"], false);

    // The services find it at Strimzi's bootstrap Service, on a plain listener's port, and
    // leave the topics to the topic operator.
    let brokers = setting("kafka-settings", "KAFKA_BROKERS");
    let (host, port) = brokers.rsplit_once(':').expect("host:port");
    let kafka_port: u64 = port.parse().expect("port");
    assert_eq!(
        host,
        format!("{kafka_name}-kafka-bootstrap.{kafka_namespace}.svc")
    );
    assert!(
        kafka["spec"]["kafka"]["listeners"]
            .as_sequence()
            .expect("listeners")
            .iter()
            .any(|l| l["port"].as_u64() == Some(kafka_port)
                && l["type"] == "internal"
                && l["tls"] == false),
        "no plain internal listener on {kafka_port}"
    );
    assert_eq!(setting("kafka-settings", "KAFKA_CREATE_TOPICS"), "false");
    let base_setting = base
        .iter()
        .find(|d| d["metadata"]["name"] == "kafka-settings")
        .expect("kafka-settings");
    assert_eq!(base_setting["data"]["KAFKA_CREATE_TOPICS"], "true");

    // The topics: the services' names (no KAFKA_TOPIC or KAFKA_DLQ_TOPIC set), partitions,
    // replicas and retention of kafka-settings, managed by the Kafka above.
    for key in ["KAFKA_TOPIC", "KAFKA_DLQ_TOPIC"] {
        assert!(
            pipeline.iter().all(|d| d["data"][key].is_null()),
            "{key} set: the topics would not be the services' defaults"
        );
    }
    let topics: BTreeMap<&str, &Value> = of_kind("KafkaTopic")
        .into_iter()
        .map(|t| (str_of(&t["spec"]["topicName"], "topicName"), t))
        .collect();
    assert_eq!(
        topics.keys().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            kafka_kit::client::EVENTS_TOPIC,
            kafka_kit::client::DEAD_LETTER_TOPIC
        ])
    );
    let partitions = number("kafka-settings", "KAFKA_TOPIC_PARTITIONS");
    let retention_ms = number("kafka-settings", "KAFKA_RETENTION_HOURS") * 3_600_000;
    for (name, topic) in &topics {
        assert_eq!(
            topic["metadata"]["labels"]["strimzi.io/cluster"], kafka_name,
            "{name}"
        );
        assert_eq!(namespace(topic), kafka_namespace, "{name}");
        assert_eq!(
            topic["spec"]["partitions"].as_u64(),
            Some(partitions),
            "{name}"
        );
        assert_eq!(
            topic["spec"]["replicas"].as_u64(),
            Some(replication),
            "{name}"
        );
        assert_eq!(
            topic["spec"]["config"]["retention.ms"].as_u64(),
            Some(retention_ms),
            "{name}"
        );
    }

    // ClickHouse: the cluster of CLICKHOUSE_CLUSTER, 2 shards of 2 replicas, its replicas
    // kept in step by the Keeper installation (Altinity's Service `keeper-<name>`).
    let chi = one("ClickHouseInstallation");
    let chi_name = str_of(&chi["metadata"]["name"], "name");
    let chi_namespace = namespace(chi);
    let clusters = chi["spec"]["configuration"]["clusters"]
        .as_sequence()
        .expect("clusters");
    assert_eq!(clusters.len(), 1);
    let cluster = str_of(&clusters[0]["name"], "cluster");
    assert_eq!(
        setting("clickhouse-settings", "CLICKHOUSE_CLUSTER"),
        cluster
    );
    let layout = &clusters[0]["layout"];
    let (shards, replicas) = (
        layout["shardsCount"].as_u64().expect("shardsCount"),
        layout["replicasCount"].as_u64().expect("replicasCount"),
    );
    assert_eq!((shards, replicas), (2, 2));
    let keeper = one("ClickHouseKeeperInstallation");
    assert_eq!(namespace(keeper), chi_namespace);
    assert_eq!(
        keeper["spec"]["configuration"]["clusters"][0]["layout"]["replicasCount"].as_u64(),
        Some(3)
    );
    assert_eq!(
        chi["spec"]["configuration"]["zookeeper"]["nodes"],
        serde_yaml::from_str::<Value>(&format!(
            "[{{host: keeper-{}, port: 2181}}]",
            str_of(&keeper["metadata"]["name"], "name")
        ))
        .expect("YAML")
    );

    // The consumer writes each shard itself: CLICKHOUSE_URL lists the Services the
    // operator gives each server (`chi-<installation>-<cluster>-<shard>-<replica>`), shard
    // by shard, as the consumer reads it; the installation's own Service
    // (`clickhouse-<installation>`, any server) is for reads.
    let url = setting("clickhouse-settings", "CLICKHOUSE_URL");
    let args = schema::ClickHouseArgs {
        clickhouse_url: url.clone(),
        clickhouse_cluster: Some(cluster.to_owned()),
        clickhouse_database: setting("clickhouse-settings", "CLICKHOUSE_DATABASE"),
        clickhouse_user: setting("clickhouse-settings", "CLICKHOUSE_USER"),
        clickhouse_password: String::new(),
    };
    let topology = schema::topology::Topology::from_args(&args).expect("a cluster");
    let servers: Vec<Vec<String>> = topology
        .shards
        .iter()
        .map(|replicas| replicas.iter().map(|s| s.url.clone()).collect())
        .collect();
    let produced: Vec<Vec<String>> = (0..shards)
        .map(|shard| {
            (0..replicas)
                .map(|replica| {
                    format!(
                        "http://chi-{chi_name}-{cluster}-{shard}-{replica}.{chi_namespace}.svc:8123"
                    )
                })
                .collect()
        })
        .collect();
    assert_eq!(servers, produced);
    assert!(
        read("deploy/k8s/operators/clickhouse-installation.yaml")
            .contains(&format!("clickhouse-{chi_name}"))
    );
    // The consumer's user, its password from a Secret of the installation's namespace.
    let users = &chi["spec"]["configuration"]["users"];
    let user = setting("clickhouse-settings", "CLICKHOUSE_USER");
    assert!(
        users[format!("{user}/k8s_secret_password").as_str()]
            .as_str()
            .is_some_and(|s| s.starts_with(&format!("{chi_namespace}/"))),
        "{user}: no password from a Secret"
    );

    // Every key of the changed ConfigMaps is read by each binary that takes them.
    let maps = config_maps(&pipeline);
    for doc in pipeline
        .iter()
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "Job")
    {
        for c in containers(&doc["spec"]["template"]["spec"]) {
            let Some(binary) = c["args"][0].as_str() else {
                continue;
            };
            for source in c["envFrom"].as_sequence().into_iter().flatten() {
                let map = str_of(&source["configMapRef"]["name"], "configMapRef");
                for key in &maps[map] {
                    assert!(
                        settings_of(binary).contains(key),
                        "{}: {key} is not read by {binary}",
                        name_of(doc)
                    );
                }
            }
        }
    }

    // The NetworkPolicies let every pod that takes a ConfigMap reach what it names (the
    // tools, run by hand, take both).
    let reaches = |app: &str, namespace: &str, port: u64| {
        pipeline
            .iter()
            .filter(|d| d["kind"] == "NetworkPolicy")
            .filter(|p| p["spec"]["podSelector"]["matchLabels"]["app"] == app)
            .flat_map(|p| {
                p["spec"]["egress"]
                    .as_sequence()
                    .cloned()
                    .unwrap_or_default()
            })
            .any(|rule| {
                rule["ports"]
                    .as_sequence()
                    .is_some_and(|ports| ports.iter().any(|p| p["port"].as_u64() == Some(port)))
                    && rule["to"].as_sequence().is_some_and(|peers| {
                        peers.iter().any(|peer| {
                            peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                                == namespace
                                && peer["podSelector"].is_null()
                        })
                    })
            })
    };
    let targets = [
        ("kafka-settings", kafka_namespace.as_str(), kafka_port),
        ("clickhouse-settings", chi_namespace.as_str(), 8123),
    ];
    let mut apps = vec![(
        "tools".to_owned(),
        vec![
            "kafka-settings".to_owned(),
            "clickhouse-settings".to_owned(),
        ],
    )];
    for doc in pipeline
        .iter()
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "Job")
    {
        let app = str_of(&doc["spec"]["template"]["metadata"]["labels"]["app"], "app");
        let taken = containers(&doc["spec"]["template"]["spec"])
            .into_iter()
            .flat_map(|c| c["envFrom"].as_sequence().cloned().unwrap_or_default())
            .map(|s| str_of(&s["configMapRef"]["name"], "configMapRef").to_owned())
            .collect();
        apps.push((app.to_owned(), taken));
    }
    let mut flows = BTreeSet::new();
    for (app, taken) in &apps {
        for (map, namespace, port) in targets {
            if taken.iter().any(|t| t == map) {
                assert!(
                    reaches(app, namespace, port),
                    "{app} may not reach namespace {namespace} on {port}"
                );
                flows.insert(format!("{app} -> {namespace}:{port}"));
            }
        }
    }
    assert_eq!(
        flows,
        BTreeSet::from([
            format!("consumer -> {kafka_namespace}:{kafka_port}"),
            format!("consumer -> {chi_namespace}:8123"),
            format!("consumer-migrate -> {chi_namespace}:8123"),
            format!("ingest -> {kafka_namespace}:{kafka_port}"),
            format!("tools -> {kafka_namespace}:{kafka_port}"),
            format!("tools -> {chi_namespace}:8123"),
        ])
    );
    // Kafka and ClickHouse live outside the pipeline's namespace (Pod Security
    // "restricted", default-deny policies).
    for doc in &operators {
        assert!(
            ["kafka", "clickhouse"].contains(&namespace(doc).as_str()),
            "{}",
            name_of(doc)
        );
    }
}

/// The binaries whose `--help` the docs may quote, by name.
const BINARIES: [&str; 7] = [
    "ingest",
    "consumer",
    "config-api",
    "dlq-replay",
    "experiment-results",
    "analytics-access",
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
            "experiment-results" | "analytics-access" | "analytics-erase" => "tools",
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

//! The compose files: services health-checked, pinned and configured with real settings, the cluster override, mounts, `docker compose config`.

use super::*;

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

/// Long-running services have a health check, a restart policy and rotated logs, and wait
/// for what they need to be healthy;
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
        // A long-running service comes back after a crash or a reboot, its logs rotated.
        if !one_shot(&name.into()) && !on_demand {
            assert_eq!(service["restart"], "unless-stopped", "{name}: restart");
            assert_eq!(service["logging"]["driver"], "json-file", "{name}: logging");
            assert!(
                service["logging"]["options"]["max-size"].is_string(),
                "{name}: logs not rotated"
            );
        }
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

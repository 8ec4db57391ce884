//! The operators' overlays (Strimzi Kafka, ClickHouse operator): their CRDs, and the services look where they are.

use super::kubernetes::{
    config_maps, containers, k8s_documents, name_of, validate_custom_resources,
};
use super::*;

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

/// The base's manifests with a component of deploy/k8s turned on: its generated
/// ConfigMaps (`behavior: merge`) merged key by key into the base's `data`, and its patches
/// of Deployments' containers their `env` added, as kustomize's strategic merge does.
fn with_component(mut docs: Vec<Value>, component: &str) -> Vec<Value> {
    let dir = format!("deploy/k8s/{component}");
    let kustomization = documents(&format!("{dir}/kustomization.yaml"));
    assert_eq!(kustomization[0]["kind"], "Component");
    let generators = kustomization[0]["configMapGenerator"].as_sequence();
    for generator in generators.into_iter().flatten() {
        assert_eq!(generator["behavior"], "merge", "{component}: {generator:?}");
    }
    let generated = generated_config_maps(&dir, &kustomization[0]);
    let patches = kustomization[0]["patches"].as_sequence().expect("patches");
    let patched = patches
        .iter()
        .flat_map(|patch| documents(&format!("{dir}/{}", str_of(&patch["path"], "patch path"))));
    for doc in generated.into_iter().chain(patched) {
        let target = docs
            .iter_mut()
            .find(|d| d["kind"] == doc["kind"] && d["metadata"]["name"] == doc["metadata"]["name"])
            .unwrap_or_else(|| panic!("{component}: {} patches nothing", name_of(&doc)));
        if doc["kind"] == "Deployment" {
            let path = ["spec", "template", "spec", "containers"];
            let patched = path
                .iter()
                .fold(&doc, |v, k| &v[*k])
                .as_sequence()
                .expect("containers");
            let mut node = &mut *target;
            for k in path {
                node = &mut node[k];
            }
            for container in patched {
                let into = node
                    .as_sequence_mut()
                    .expect("containers")
                    .iter_mut()
                    .find(|c| c["name"] == container["name"])
                    .expect("the container patched");
                let env = into["env"].as_sequence_mut().expect("env");
                env.extend(container["env"].as_sequence().expect("env").iter().cloned());
            }
            continue;
        }
        assert_eq!(
            doc["kind"], "ConfigMap",
            "{component}: only ConfigMaps and Deployments merged here"
        );
        let data = target["data"].as_mapping_mut().expect("data");
        for (key, value) in doc["data"].as_mapping().expect("data") {
            data.insert(key.clone(), value.clone());
        }
    }
    docs
}

/// What the tests below read: deploy/k8s/operators (Kafka run by Strimzi, ClickHouse by
/// the Altinity operator) and the base with its component `operators/settings`, which
/// points the services at the Services those resources produce, with topic creation off.
struct Manifests {
    /// The base, as deployed without the component.
    base: Vec<Value>,
    /// deploy/k8s/operators.
    operators: Vec<Value>,
    /// The base with the component `operators/settings` turned on.
    pipeline: Vec<Value>,
}

impl Manifests {
    fn read() -> Self {
        let base = k8s_documents();
        let pipeline = with_component(base.clone(), "operators/settings");
        Self {
            base,
            operators: kustomization_files("deploy/k8s/operators"),
            pipeline,
        }
    }

    fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.operators
            .iter()
            .filter(|d| d["kind"] == kind)
            .collect()
    }

    fn one(&self, kind: &str) -> &Value {
        let all = self.of_kind(kind);
        assert_eq!(all.len(), 1, "one {kind}");
        all[0]
    }

    /// `key` of the component's ConfigMap `map`.
    fn setting(&self, map: &str, key: &str) -> String {
        let doc = self
            .pipeline
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == map)
            .unwrap_or_else(|| panic!("no ConfigMap {map}"));
        str_of(&doc["data"][key], key).to_owned()
    }

    fn number(&self, map: &str, key: &str) -> u64 {
        self.setting(map, key)
            .parse()
            .unwrap_or_else(|e| panic!("{key}: {e}"))
    }

    /// KAFKA_BROKERS: its host and port.
    fn kafka_bootstrap(&self) -> (String, u64) {
        let brokers = self.setting("kafka-settings", "KAFKA_BROKERS");
        let (host, port) = brokers.rsplit_once(':').expect("host:port");
        (host.to_owned(), port.parse().expect("port"))
    }
}

fn namespace(d: &Value) -> String {
    str_of(&d["metadata"]["namespace"], "namespace").to_owned()
}

/// kustomize itself, where kubectl is installed, builds the same: the operators' folder,
/// and the base with the component turned on (in a copy).
#[test]
fn kubectl_kustomize_builds_the_operators_and_the_component_as_read() {
    let Manifests {
        operators,
        pipeline,
        ..
    } = Manifests::read();
    assert!(read("deploy/k8s/kustomization.yaml").contains("\n#   - operators/settings\n"));
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
            // Built, a generated ConfigMap's name ends in its content's hash.
            let by_name = |docs: &[Value]| -> BTreeMap<String, Value> {
                docs.iter()
                    .map(|d| (unhashed(&name_of(d)), d.clone()))
                    .collect()
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
}

/// Every custom resource passes its CRD's schema (e2e/tests/k8s-schemas/crds), and a
/// broken copy of each kind fails, for the reason given.
#[test]
fn each_custom_resource_passes_its_crd_and_a_broken_copy_fails() {
    let manifests = Manifests::read();
    let operators = &manifests.operators;
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
            "KafkaUser",
        ])
    );
    let (accepted, report) = validate_custom_resources(operators);
    assert!(accepted, "{report}");
    assert_eq!(
        report.matches("valid: ").count(),
        operators.len(),
        "{report}"
    );
    // A broken copy of each kind.
    let breakages: [(&str, &str, &str, Value, &str); 7] = [
        (
            "KafkaUser",
            "/spec/authentication",
            "type",
            "scram-sha-256".into(),
            "allowed values",
        ),
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
        let mut doc = manifests.of_kind(kind)[0].clone();
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
}

/// Kafka in KRaft mode: one node pool of the Kafka, three nodes each a controller and a
/// broker (a quorum of three, a broker for each of the topics' replicas). The services
/// find it at Strimzi's bootstrap Service, on a plain listener's port, and leave the topics
/// to the topic operator: the services' names, with the partitions, replicas and retention
/// of kafka-settings.
#[test]
fn kafka_runs_in_kraft_with_the_services_topics_where_they_look() {
    let m = Manifests::read();
    let kafka = m.one("Kafka");
    let kafka_name = str_of(&kafka["metadata"]["name"], "name");
    let kafka_namespace = namespace(kafka);
    assert!(kafka["spec"]["zookeeper"].is_null(), "KRaft, no ZooKeeper");
    let pool = m.one("KafkaNodePool");
    assert_eq!(pool["metadata"]["labels"]["strimzi.io/cluster"], kafka_name);
    assert_eq!(namespace(pool), kafka_namespace);
    assert_eq!(pool["spec"]["replicas"].as_u64(), Some(3));
    assert_eq!(
        pool["spec"]["roles"],
        serde_yaml::from_str::<Value>("[controller, broker]").expect("YAML")
    );
    let replication = m.number("kafka-settings", "KAFKA_REPLICATION_FACTOR");
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
    let (host, kafka_port) = m.kafka_bootstrap();
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
    assert_eq!(m.setting("kafka-settings", "KAFKA_CREATE_TOPICS"), "false");
    let base_setting = m
        .base
        .iter()
        .find(|d| d["metadata"]["name"] == "kafka-settings")
        .expect("kafka-settings");
    assert_eq!(base_setting["data"]["KAFKA_CREATE_TOPICS"], "true");

    // The topics: the services' names (no KAFKA_TOPIC or KAFKA_DLQ_TOPIC set), partitions,
    // replicas and retention of kafka-settings, managed by the Kafka above.
    for key in ["KAFKA_TOPIC", "KAFKA_DLQ_TOPIC"] {
        assert!(
            m.pipeline.iter().all(|d| d["data"][key].is_null()),
            "{key} set: the topics would not be the services' defaults"
        );
    }
    let topics: BTreeMap<&str, &Value> = m
        .of_kind("KafkaTopic")
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
    let partitions = m.number("kafka-settings", "KAFKA_TOPIC_PARTITIONS");
    let retention_ms = m.number("kafka-settings", "KAFKA_RETENTION_HOURS") * 3_600_000;
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
}

/// ClickHouse: the cluster of CLICKHOUSE_CLUSTER, 2 shards of 2 replicas, its replicas
/// kept in step by the Keeper installation (Altinity's Service `keeper-<name>`), where the
/// consumer writes each shard, as its user.
#[test]
fn clickhouse_is_two_shards_of_two_replicas_where_the_consumer_writes() {
    let m = Manifests::read();
    let chi = m.one("ClickHouseInstallation");
    let chi_name = str_of(&chi["metadata"]["name"], "name");
    let chi_namespace = namespace(chi);
    let clusters = chi["spec"]["configuration"]["clusters"]
        .as_sequence()
        .expect("clusters");
    assert_eq!(clusters.len(), 1);
    let cluster = str_of(&clusters[0]["name"], "cluster");
    assert_eq!(
        m.setting("clickhouse-settings", "CLICKHOUSE_CLUSTER"),
        cluster
    );
    let layout = &clusters[0]["layout"];
    let (shards, replicas) = (
        layout["shardsCount"].as_u64().expect("shardsCount"),
        layout["replicasCount"].as_u64().expect("replicasCount"),
    );
    assert_eq!((shards, replicas), (2, 2));
    let keeper = m.one("ClickHouseKeeperInstallation");
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
    let url = m.setting("clickhouse-settings", "CLICKHOUSE_URL");
    let args = clickhouse_kit::ClickHouseArgs {
        clickhouse_url: url.clone(),
        clickhouse_cluster: Some(cluster.to_owned()),
        clickhouse_database: m.setting("clickhouse-settings", "CLICKHOUSE_DATABASE"),
        clickhouse_user: m.setting("clickhouse-settings", "CLICKHOUSE_USER"),
        clickhouse_password: String::new(),
    };
    let topology = clickhouse_kit::topology::Topology::from_args(&args).expect("a cluster");
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
    let user = m.setting("clickhouse-settings", "CLICKHOUSE_USER");
    assert!(
        users[format!("{user}/k8s_secret_password").as_str()]
            .as_str()
            .is_some_and(|s| s.starts_with(&format!("{chi_namespace}/"))),
        "{user}: no password from a Secret"
    );
}

/// Every key of the component's ConfigMaps is read by each binary that takes them, the
/// NetworkPolicies let every pod that takes one reach what it names, and Kafka and
/// ClickHouse live outside the pipeline's namespace.
#[test]
fn the_component_s_settings_are_read_and_its_policies_let_them_through() {
    let m = Manifests::read();
    let pipeline = &m.pipeline;
    let kafka_namespace = namespace(m.one("Kafka"));
    let (_, kafka_port) = m.kafka_bootstrap();
    let chi_namespace = namespace(m.one("ClickHouseInstallation"));
    // Every key of the changed ConfigMaps is read by each binary that takes them.
    let maps = config_maps(pipeline);
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
    // "restricted", default-deny policies); the Kafka users in it, beside their Secrets.
    for doc in &m.operators {
        let home = if doc["kind"] == "KafkaUser" {
            vec!["split-pipeline"]
        } else {
            vec!["kafka", "clickhouse"]
        };
        assert!(home.contains(&namespace(doc).as_str()), "{}", name_of(doc));
    }
}

/// Kafka is not open to every pod: every listener asks for SCRAM-SHA-512, ACLs authorize,
/// and each client logs in as its own KafkaUser, allowed only what it does (ingest writes
/// the events; the consumer reads them in its group and writes the dead letters; the tools
/// read those in theirs and write them back). Each Deployment takes its password from its
/// user's Secret, which the user operator makes where it watches; no ConfigMap holds one.
#[test]
fn kafka_asks_every_client_to_log_in_and_allows_each_only_what_it_does() {
    let m = Manifests::read();
    let kafka = m.one("Kafka");
    for listener in kafka["spec"]["kafka"]["listeners"]
        .as_sequence()
        .expect("listeners")
    {
        assert_eq!(
            listener["authentication"]["type"], "scram-sha-512",
            "{listener:?}"
        );
    }
    assert_eq!(kafka["spec"]["kafka"]["authorization"]["type"], "simple");
    let watched = &kafka["spec"]["entityOperator"]["userOperator"]["watchedNamespace"];
    let acls = |user: &str| -> BTreeSet<String> {
        let doc = m
            .of_kind("KafkaUser")
            .into_iter()
            .find(|d| d["metadata"]["name"] == user)
            .unwrap_or_else(|| panic!("no KafkaUser {user}"));
        assert_eq!(&doc["metadata"]["namespace"], watched, "{user}");
        assert_eq!(doc["spec"]["authentication"]["type"], "scram-sha-512");
        doc["spec"]["authorization"]["acls"]
            .as_sequence()
            .expect("acls")
            .iter()
            .flat_map(|acl| {
                let r = &acl["resource"];
                assert_eq!(r["patternType"], "literal", "{user}: {r:?}");
                acl["operations"]
                    .as_sequence()
                    .expect("operations")
                    .iter()
                    .map(move |op| {
                        format!(
                            "{} {} {}",
                            str_of(op, "operation"),
                            str_of(&r["type"], "type"),
                            str_of(&r["name"], "name")
                        )
                    })
            })
            .collect()
    };
    let set = |ops: &[&str]| ops.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    assert_eq!(
        acls("ingest"),
        set(&[
            "Describe topic analytics-events",
            "Write topic analytics-events"
        ])
    );
    assert_eq!(
        acls("consumer"),
        set(&[
            "Describe group analytics-consumer",
            "Describe topic analytics-events",
            "Describe topic analytics-events-dlq",
            "Read group analytics-consumer",
            "Read topic analytics-events",
            "Write topic analytics-events-dlq",
        ])
    );
    assert_eq!(
        acls("tools"),
        set(&[
            "Describe group analytics-dlq-replay",
            "Describe topic analytics-events",
            "Describe topic analytics-events-dlq",
            "Read group analytics-dlq-replay",
            "Read topic analytics-events-dlq",
            "Write topic analytics-events",
        ])
    );
    assert_eq!(
        m.setting("kafka-settings", "KAFKA_PROPERTIES"),
        "security.protocol=SASL_PLAINTEXT;sasl.mechanism=SCRAM-SHA-512"
    );
    for app in ["ingest", "consumer"] {
        let deployment = m
            .pipeline
            .iter()
            .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == app)
            .expect("deployment");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        let var = |name: &str| {
            env_var(container, name)
                .unwrap_or_else(|| panic!("{app}: no {name}"))
                .clone()
        };
        assert_eq!(var("KAFKA_SASL_USERNAME")["value"], app);
        let secret = &var("KAFKA_SASL_PASSWORD")["valueFrom"]["secretKeyRef"];
        assert_eq!(secret["name"], app);
        assert_eq!(secret["key"], "password");
    }
    for doc in m.pipeline.iter().filter(|d| d["kind"] == "ConfigMap") {
        let text = serde_yaml::to_string(&doc["data"]).expect("YAML");
        assert!(!text.contains("sasl.password"), "{}", name_of(doc));
    }
}

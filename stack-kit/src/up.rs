//! The pipeline of `scripts/up` in `.run/up`: ClickHouse (one server or the cluster), the
//! broker, the consumer, the ingest, the config-api and the nginx front, started
//! idempotently; and `scripts/down`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;

use crate::clickhouse::{self, CLUSTER_SERVERS, ClusterPorts, Server};
use crate::process::{self, http_ok};
use crate::tansu::{self, Broker, Storage};

/// The ports of scripts/up.
pub const FRONT_PORT: u16 = 8080;
pub const INGEST_PORT: u16 = 8081;
pub const CONFIG_API_PORT: u16 = 8082;
pub const CONSUMER_PORT: u16 = 8083;
/// The analysts' way in to ClickHouse (`analytics-gate`, docs/access.md).
pub const GATE_PORT: u16 = 8084;
pub const BROKER_PORT: u16 = 9092;
pub const CLICKHOUSE_HTTP_PORT: u16 = 8123;
pub const CLICKHOUSE_TCP_PORT: u16 = 9000;
/// The cluster's: ZooKeeper on 2181, servers on 8123-8126, 9000-9003 and 9009-9012.
pub const CLUSTER_PORTS: ClusterPorts = ClusterPorts {
    zookeeper: 2181,
    http: 8123,
    tcp: 9000,
    interserver: 9009,
};

/// Where ClickHouse runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Topology {
    Single,
    /// ZooKeeper and two shards of two replicas.
    Cluster,
}

/// What scripts/up is given.
pub struct Settings {
    /// The repository: its `deploy/`, `sdk/dist` and `target/release/`.
    pub repo: PathBuf,
    /// The experiments snapshot, read in place by the services.
    pub snapshot: PathBuf,
    pub topology: Topology,
    /// The `tansu` binary.
    pub tansu: PathBuf,
    /// `KAFKA_TOPIC_PARTITIONS` of the services.
    pub partitions: u32,
}

/// The run folder of scripts/up in `repo`.
pub fn run_dir(repo: &Path) -> PathBuf {
    repo.join(".run/up")
}

/// Where scripts/up records a process's pid under `run_dir`: `tansu`, `clickhouse`,
/// `zookeeper`, the cluster's `ch1`…`ch4`, or a service (`ingest`, `consumer`…).
pub fn pidfile(run_dir: &Path, name: &str) -> PathBuf {
    match name {
        "tansu" => run_dir.join("tansu/tansu.pid"),
        "clickhouse" => run_dir.join("clickhouse/clickhouse.pid"),
        "zookeeper" => run_dir.join("cluster/zookeeper/zookeeper.pid"),
        "nginx" => run_dir.join("nginx/nginx.pid"),
        s if s
            .strip_prefix("ch")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
        {
            run_dir.join("cluster").join(s).join("clickhouse.pid")
        }
        s => run_dir.join(format!("{s}.pid")),
    }
}

/// Starts whatever of the pipeline is not running, and restarts a service whose binary or
/// settings changed. The binaries must be built (`target/release/`), the SDK too.
pub fn up(settings: &Settings) -> anyhow::Result<()> {
    let repo = &settings.repo;
    let run = run_dir(repo);
    anyhow::ensure!(
        settings.snapshot.is_file(),
        "EXPERIMENTS_SNAPSHOT: no file at {}",
        settings.snapshot.display()
    );
    // The services' logs hold visitors' ids and addresses: their owner's only.
    process::private_dir(&run.join("logs"))?;

    // The consumer writes as its own user, `consumer`, whose password is made once into
    // .run/up/secrets/; `default` is for operators, from this machine only.
    let secret = run.join("secrets/clickhouse-consumer-password");
    let clickhouse_url = match settings.topology {
        Topology::Single => {
            clickhouse::stop_cluster(&run.join("cluster"))?;
            let dir = run.join("clickhouse");
            clickhouse::service_user(&dir, "consumer", &secret)?;
            clickhouse::start(
                repo,
                &Server {
                    dir: &dir,
                    http_port: CLICKHOUSE_HTTP_PORT,
                    tcp_port: CLICKHOUSE_TCP_PORT,
                    extra_config: None,
                    env: &[],
                },
            )?;
            wait_for_user(&dir, CLICKHOUSE_HTTP_PORT, &secret, "")?;
            vec![(
                "CLICKHOUSE_URL",
                format!("http://127.0.0.1:{CLICKHOUSE_HTTP_PORT}"),
            )]
        }
        Topology::Cluster => {
            clickhouse::stop(&run.join("clickhouse"), "clickhouse")?;
            let dir = run.join("cluster");
            for n in 1..=CLUSTER_SERVERS {
                clickhouse::service_user(&dir.join(format!("ch{n}")), "consumer", &secret)?;
            }
            clickhouse::start_cluster(repo, &dir, CLUSTER_PORTS)?;
            for n in 1..=CLUSTER_SERVERS {
                wait_for_user(
                    &dir.join(format!("ch{n}")),
                    CLUSTER_PORTS.http + n - 1,
                    &secret,
                    &format!(" on ch{n}"),
                )?;
            }
            vec![
                (
                    "CLICKHOUSE_URL",
                    clickhouse::cluster_urls(CLUSTER_PORTS.http),
                ),
                ("CLICKHOUSE_CLUSTER", "analytics".to_owned()),
            ]
        }
    };
    tansu::start(&Broker {
        bin: &settings.tansu,
        dir: &run.join("tansu"),
        port: BROKER_PORT,
        storage: Storage::Sqlite,
        maintenance_interval: None,
    })?;

    // Each service's settings, in the order of their signature.
    let snapshot = (
        "EXPERIMENTS_SNAPSHOT",
        settings.snapshot.display().to_string(),
    );
    let kafka = [
        ("KAFKA_BROKERS", format!("127.0.0.1:{BROKER_PORT}")),
        ("KAFKA_TOPIC_PARTITIONS", settings.partitions.to_string()),
    ];
    let mut consumer = kafka.to_vec();
    consumer.push(("CONSUMER_LISTEN", format!("127.0.0.1:{CONSUMER_PORT}")));
    // The gate reads the first server of the list (in a cluster each holds every copy).
    let gate_clickhouse = clickhouse_url[0].1.clone();
    consumer.extend(clickhouse_url);
    consumer.extend([
        ("CLICKHOUSE_DATABASE", "analytics".to_owned()),
        snapshot.clone(),
        ("CLICKHOUSE_USER", "consumer".to_owned()),
        ("CLICKHOUSE_PASSWORD", clickhouse::password(&secret)?),
    ]);
    start_service(repo, "consumer", CONSUMER_PORT, &consumer)?;
    let mut ingest = kafka.to_vec();
    ingest.push(("INGEST_LISTEN", format!("127.0.0.1:{INGEST_PORT}")));
    ingest.push(snapshot.clone());
    start_service(repo, "ingest", INGEST_PORT, &ingest)?;
    start_service(
        repo,
        "config-api",
        CONFIG_API_PORT,
        &[
            ("CONFIG_API_LISTEN", format!("127.0.0.1:{CONFIG_API_PORT}")),
            snapshot,
        ],
    )?;

    start_service(
        repo,
        "analytics-gate",
        GATE_PORT,
        &[
            ("GATE_LISTEN", format!("127.0.0.1:{GATE_PORT}")),
            ("CLICKHOUSE_URL", gate_clickhouse),
        ],
    )?;

    // The front: the contract's single base URL.
    crate::front::start(
        repo,
        &run.join("nginx"),
        FRONT_PORT,
        &format!("127.0.0.1:{INGEST_PORT}"),
        &format!("127.0.0.1:{CONFIG_API_PORT}"),
    )
}

/// Stops everything [`up`] started (the data stays in `.run/up`).
pub fn down(repo: &Path) -> anyhow::Result<()> {
    let run = run_dir(repo);
    crate::front::stop(&run.join("nginx"))?;
    for name in ["ingest", "config-api", "consumer", "analytics-gate"] {
        process::stop(&pidfile(&run, name), name)?;
    }
    tansu::stop(&run.join("tansu"), "tansu")?;
    clickhouse::stop(&run.join("clickhouse"), "clickhouse")?;
    clickhouse::stop_cluster(&run.join("cluster"))
}

/// Waits up to 30 s for the consumer's user on the server of `dir` (a running server
/// reads a new users.d file within seconds).
fn wait_for_user(dir: &Path, http_port: u16, secret: &Path, on: &str) -> anyhow::Result<()> {
    process::wait_ready(
        Duration::from_secs(30),
        &dir.join("clickhouse.pid"),
        &dir.join("log/clickhouse-server.err.log"),
        &format!("ClickHouse user consumer{on}"),
        || clickhouse::user_ok(http_port, "consumer", secret),
    )
}

/// (Re)starts `target/release/NAME` with `settings` over the environment, unless the same
/// binary with the same settings runs, then waits up to 120 s for its `/readyz`.
fn start_service(
    repo: &Path,
    name: &str,
    port: u16,
    settings: &[(&str, String)],
) -> anyhow::Result<()> {
    let run = run_dir(repo);
    let bin = repo.join("target/release").join(name);
    let pidfile = pidfile(&run, name);
    let sigfile = run.join(format!("{name}.sig"));
    let log = run.join(format!("logs/{name}.log"));
    // A hash of the settings: they may hold a password.
    let binary = std::fs::read(&bin).with_context(|| format!("{} not built", bin.display()))?;
    let lines: String = settings.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    let signature = format!(
        "{} {}",
        crate::sha256_hex(&binary),
        crate::sha256_hex(lines.as_bytes())
    );
    if process::pidfile_running(&pidfile)
        && std::fs::read_to_string(&sigfile).is_ok_and(|s| s.trim_end() == signature)
    {
        return Ok(());
    }
    process::stop(&pidfile, name)?;
    process::claim_port(port, name)?;
    crate::log(&format!("Starting {name} on 127.0.0.1:{port}"));
    let output = process::Output {
        log: &log,
        append: true,
        private: true,
    };
    process::spawn(
        Command::new(&bin)
            .current_dir(repo)
            .envs(settings.iter().map(|(k, v)| (k, v))),
        output,
        &pidfile,
    )?;
    process::write_private(&sigfile, &format!("{signature}\n"))?;
    process::wait_ready(Duration::from_secs(120), &pidfile, &log, name, || {
        http_ok(port, "/readyz")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_process_has_the_pid_file_up_writes() {
        let dir = Path::new("/r/.run/up");
        for (name, path) in [
            ("tansu", "/r/.run/up/tansu/tansu.pid"),
            ("clickhouse", "/r/.run/up/clickhouse/clickhouse.pid"),
            ("ch3", "/r/.run/up/cluster/ch3/clickhouse.pid"),
            ("zookeeper", "/r/.run/up/cluster/zookeeper/zookeeper.pid"),
            ("nginx", "/r/.run/up/nginx/nginx.pid"),
            ("consumer", "/r/.run/up/consumer.pid"),
            ("config-api", "/r/.run/up/config-api.pid"),
            ("chaos", "/r/.run/up/chaos.pid"),
        ] {
            assert_eq!(pidfile(dir, name), Path::new(path), "{name}");
        }
    }
}

//! `stack`: the local stack's processes for the scripts (`scripts/up`, `scripts/down`,
//! `scripts/test`), which keep only the installs and call this.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use stack_kit::clickhouse::{self, ClusterPorts, Server};
use stack_kit::tansu::{self, Broker, Storage};
use stack_kit::up::Topology;
use stack_kit::{process, up};

#[derive(Parser)]
#[command(about = "Starts and stops the local stack's processes, each recorded by a pid file.")]
struct Cli {
    /// The repository (its deploy/, sdk/dist and target/release/).
    #[arg(long)]
    repo: PathBuf,
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand)]
enum Commands {
    /// The pipeline of scripts/up in .run/up, started idempotently; prints its base URL.
    Up {
        /// The experiments snapshot (default deploy/experiments.json).
        #[arg(long = "experiments-snapshot", env = "EXPERIMENTS_SNAPSHOT")]
        snapshot: Option<PathBuf>,
        /// One ClickHouse server, or ZooKeeper and two shards of two replicas.
        #[arg(
            long = "clickhouse-topology",
            env = "CLICKHOUSE_TOPOLOGY",
            value_enum,
            default_value = "single"
        )]
        topology: Topology,
        /// The tansu binary.
        #[arg(long, env = "TANSU")]
        tansu: PathBuf,
        #[arg(long, env = "KAFKA_TOPIC_PARTITIONS", default_value_t = 3)]
        partitions: u32,
    },
    /// Stops everything `up` started.
    Down,
    /// A ClickHouse server in DIR, unless it runs.
    StartClickhouse {
        dir: PathBuf,
        http_port: u16,
        tcp_port: u16,
    },
    /// ZooKeeper and the four servers of the cluster in DIR, whatever of them is not
    /// running; server N on each base port + N - 1.
    StartCluster {
        dir: PathBuf,
        zookeeper_port: u16,
        http_base: u16,
        tcp_base: u16,
        interserver_base: u16,
    },
    /// Stops the cluster of DIR.
    StopCluster { dir: PathBuf },
    /// The consumer's CLICKHOUSE_URL for the cluster whose first server's HTTP port is
    /// HTTP_BASE.
    ClusterUrls { http_base: u16 },
    /// A Tansu broker in DIR, unless it runs.
    StartTansu {
        dir: PathBuf,
        port: u16,
        #[arg(value_enum)]
        storage: Storage,
        #[arg(long, env = "TANSU")]
        tansu: PathBuf,
    },
    /// Stops the process of PIDFILE: SIGTERM, up to 20 s, then SIGKILL.
    Stop { pidfile: PathBuf, name: String },
    /// Prints PORT if nothing listens on 127.0.0.1:PORT, else the next free one above it.
    FreePort { port: u16 },
    /// Exits 0 when the process of PIDFILE runs, 1 when not.
    Running { pidfile: PathBuf },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let repo = &cli.repo;
    match cli.command {
        Commands::Up {
            snapshot,
            topology,
            tansu,
            partitions,
        } => {
            let snapshot = snapshot.unwrap_or_else(|| repo.join("deploy/experiments.json"));
            // As realpath(1) names it: the services read the file itself, in place.
            let snapshot = std::path::absolute(&snapshot)?;
            let snapshot = snapshot.canonicalize().unwrap_or(snapshot);
            up::up(&up::Settings {
                repo: repo.clone(),
                snapshot,
                topology,
                tansu,
                partitions,
            })?;
            println!("http://127.0.0.1:{}", up::FRONT_PORT);
        }
        Commands::Down => {
            up::down(repo)?;
            stack_kit::log("Everything scripts/up started is stopped.");
        }
        Commands::StartClickhouse {
            dir,
            http_port,
            tcp_port,
        } => clickhouse::start(
            repo,
            &Server {
                dir: &dir,
                http_port,
                tcp_port,
                extra_config: None,
                env: &[],
            },
        )?,
        Commands::StartCluster {
            dir,
            zookeeper_port,
            http_base,
            tcp_base,
            interserver_base,
        } => clickhouse::start_cluster(
            repo,
            &dir,
            ClusterPorts {
                zookeeper: zookeeper_port,
                http: http_base,
                tcp: tcp_base,
                interserver: interserver_base,
            },
        )?,
        Commands::StopCluster { dir } => clickhouse::stop_cluster(&dir)?,
        Commands::ClusterUrls { http_base } => println!("{}", clickhouse::cluster_urls(http_base)),
        Commands::StartTansu {
            dir,
            port,
            storage,
            tansu,
        } => tansu::start(&Broker {
            bin: &tansu,
            dir: &dir,
            port,
            storage,
            maintenance_interval: None,
        })?,
        Commands::FreePort { port } => println!("{}", process::free_port_from(port)),
        Commands::Stop { pidfile, name } => process::stop(&pidfile, &name)?,
        Commands::Running { pidfile } => {
            return Ok(if process::pidfile_running(&pidfile) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

//! What `scripts/bench` is told: `devtool bench`'s arguments, each also read from its
//! `BENCH_…` variable (`devtool bench --help` lists them with their defaults), parsed by
//! clap before anything starts. scripts/bench unsets an empty variable, so that it counts
//! as unset, as `${VAR:-default}` has it (`unset_empty`, scripts/lib.sh); a count that is not a whole number, or a section or switch that means nothing,
//! is refused with the usage. The peers' binaries are checked here too, before any server
//! starts.

use std::path::{Path, PathBuf};

/// The run's settings.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Rounds of the config-api and ingest series.
    #[arg(long, env = "BENCH_ROUNDS", default_value_t = 5)]
    pub rounds: u64,
    /// Rounds of the consumer series.
    #[arg(long, env = "BENCH_CONSUMER_ROUNDS", default_value_t = 3)]
    pub consumer_rounds: u64,
    /// Seconds measured per round.
    #[arg(long, env = "BENCH_SECONDS", default_value_t = 10)]
    pub seconds: u64,
    /// The config-api's connections.
    #[arg(long, env = "BENCH_CONNECTIONS", default_value_t = 64)]
    pub connections: u64,
    /// The ingest's connections (browsers, each with one request in flight).
    #[arg(long, env = "BENCH_INGEST_CONNECTIONS", default_value_t = 256)]
    pub ingest_connections: u64,
    /// Events of the consumer's backlog.
    #[arg(
        long = "backlog-events",
        env = "BENCH_BACKLOG_EVENTS",
        default_value_t = 1_000_000
    )]
    pub backlog: u64,
    /// Events per raw producer round.
    #[arg(long, env = "BENCH_PRODUCE_EVENTS", default_value_t = 2_000_000)]
    pub produce_events: u64,
    /// fetch.wait.max.ms of the readers of the benchmark's broker.
    #[arg(long, env = "BENCH_FETCH_WAIT_MS", default_value_t = 5)]
    pub fetch_wait_ms: u64,
    /// The one section to run; every section without it.
    #[arg(long, env = "BENCH_ONLY", value_enum)]
    pub only: Option<Section>,
    /// The whole pipeline's rates, as `loadgen pipeline --rates` takes them.
    #[arg(
        long,
        env = "BENCH_PIPELINE_RATES",
        default_value = "2000,5000,10000,15000,20000,30000,40000"
    )]
    pub pipeline_rates: String,
    /// Seconds per rate of the whole pipeline.
    #[arg(long, env = "BENCH_PIPELINE_SECONDS", default_value_t = 30)]
    pub pipeline_seconds: u64,
    /// 1: measure the peers too (their binaries below); 0: not.
    #[arg(long = "peers", env = "BENCH_PEERS", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=1))]
    pub measure_peers: u8,
    #[command(flatten)]
    pub peer_binaries: Peers,
    /// The snapshot to serve; the demo snapshot without it.
    #[arg(long, env = "EXPERIMENTS_SNAPSHOT")]
    pub snapshot: Option<PathBuf>,
}

/// A section of a run: what `--only` may name.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    ConfigApi,
    Ingest,
    Consumer,
    Pipeline,
}

/// Where the peers' binaries are, as given (checked by [`Settings::check_peers`]).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct Peers {
    /// Unleash Edge's binary, the config-api's peer.
    #[arg(long, env = "BENCH_UNLEASH_EDGE")]
    pub unleash_edge: Option<PathBuf>,
    /// PostHog capture's binary, the ingest's peer.
    #[arg(long, env = "BENCH_POSTHOG_CAPTURE")]
    pub posthog_capture: Option<PathBuf>,
    /// A folder with a librdkafka.so.1 for ClickHouse's Kafka engine, the consumer's peer.
    #[arg(long, env = "BENCH_CLICKHOUSE_LIBRDKAFKA")]
    pub clickhouse_librdkafka: Option<PathBuf>,
}

impl Settings {
    /// The peers' binaries when the peers are measured.
    pub fn peers(&self) -> Option<&Peers> {
        (self.measure_peers == 1).then_some(&self.peer_binaries)
    }

    /// Whether the run measures `section`: every section unless `BENCH_ONLY` names
    /// another.
    pub fn wanted(&self, section: Section) -> bool {
        self.only.is_none_or(|only| only == section)
    }

    /// With the peers, each wanted section's peer must be there: the first missing one's
    /// refusal. `probe` says whether a file is executable, a file exists, or a command is
    /// on PATH.
    pub fn check_peers(&self, probe: &dyn Fn(Probe<'_>) -> bool) -> Result<(), String> {
        let Some(peers) = self.peers() else {
            return Ok(());
        };
        let need = |variable: &str, path: &Option<PathBuf>| match path {
            Some(path) if probe(Probe::Executable(path)) => Ok(()),
            _ => Err(format!(
                "BENCH_PEERS=1 needs {variable}, the path of the peer's binary \
                 (docs/benchmarks.md, Peers)"
            )),
        };
        if self.wanted(Section::ConfigApi) {
            need("BENCH_UNLEASH_EDGE", &peers.unleash_edge)?;
        }
        if self.wanted(Section::Ingest) {
            need("BENCH_POSTHOG_CAPTURE", &peers.posthog_capture)?;
            if !probe(Probe::Command("redis-server")) {
                return Err("PostHog capture needs redis-server (Debian's)".to_owned());
            }
        }
        if self.wanted(Section::Consumer) && !probe(Probe::File(&self.librdkafka())) {
            return Err(
                "BENCH_PEERS=1 needs BENCH_CLICKHOUSE_LIBRDKAFKA, a folder with a \
                 librdkafka.so.1 for ClickHouse's Kafka engine (docs/benchmarks.md, Peers)"
                    .to_owned(),
            );
        }
        Ok(())
    }

    /// The librdkafka that the Kafka engine's ClickHouse loads (`/librdkafka.so.1` when
    /// the folder is not given, as the script has always looked for it).
    pub fn librdkafka(&self) -> PathBuf {
        let folder = self
            .peers()
            .and_then(|p| p.clickhouse_librdkafka.clone())
            .unwrap_or_default();
        PathBuf::from(format!("{}/librdkafka.so.1", folder.display()))
    }
}

/// What [`Settings::check_peers`] asks of the machine.
#[derive(Debug)]
pub enum Probe<'a> {
    Executable(&'a Path),
    File(&'a Path),
    Command(&'a str),
}

/// The machine's answer to a [`Probe`].
pub fn probe(probe: Probe<'_>) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| !m.is_dir() && m.permissions().mode() & 0o111 != 0)
    };
    match probe {
        Probe::Executable(path) => executable(path),
        Probe::File(path) => std::fs::metadata(path).is_ok_and(|m| m.is_file()),
        Probe::Command(name) => std::env::var_os("PATH").is_some_and(|paths| {
            std::env::split_paths(&paths).any(|dir| executable(&dir.join(name)))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        settings: Settings,
    }

    fn parse(args: &[&str]) -> Result<Settings, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .map(|cli| cli.settings)
    }

    #[test]
    fn defaults_are_those_of_the_usage() {
        let settings = parse(&[]).unwrap();
        assert_eq!(
            settings,
            Settings {
                rounds: 5,
                consumer_rounds: 3,
                seconds: 10,
                connections: 64,
                ingest_connections: 256,
                backlog: 1_000_000,
                produce_events: 2_000_000,
                fetch_wait_ms: 5,
                only: None,
                pipeline_rates: "2000,5000,10000,15000,20000,30000,40000".to_owned(),
                pipeline_seconds: 30,
                measure_peers: 0,
                peer_binaries: Peers::default(),
                snapshot: settings.snapshot.clone(),
            }
        );
        let settings = parse(&[
            "--rounds=1",
            "--consumer-rounds=2",
            "--seconds=3",
            "--pipeline-rates=2000,5000",
            "--only=ingest",
            "--peers=1",
            "--unleash-edge=/opt/edge",
        ])
        .unwrap();
        assert_eq!(
            (settings.rounds, settings.consumer_rounds, settings.seconds),
            (1, 2, 3)
        );
        assert_eq!(settings.pipeline_rates, "2000,5000");
        let peers = settings.peers().unwrap();
        assert_eq!(peers.unleash_edge, Some(PathBuf::from("/opt/edge")));
        assert!(settings.wanted(Section::Ingest));
        assert!(!settings.wanted(Section::ConfigApi));
        assert!(parse(&[]).unwrap().wanted(Section::Pipeline));
        // 0 is off, as an experienced user reads it, and so is unset.
        let off = parse(&["--peers=0", "--unleash-edge=/opt/edge"]).unwrap();
        assert_eq!(off.peers(), None);
    }

    /// Each setting is read from the variable scripts/bench's usage names, and the usage
    /// names no other.
    #[test]
    fn every_setting_has_the_variable_the_usage_names() {
        let command = Cli::command();
        let mut read: Vec<String> = command
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .filter(|e| e.starts_with("BENCH_"))
            .collect();
        read.sort();
        let script =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/bench"))
                .unwrap();
        let mut usage: Vec<String> = script
            .lines()
            .take_while(|l| l.starts_with('#'))
            .flat_map(|l| l.split(|c: char| !c.is_ascii_alphanumeric() && c != '_'))
            .filter(|w| w.starts_with("BENCH_"))
            .map(str::to_owned)
            .collect();
        usage.sort();
        usage.dedup();
        assert_eq!(read, usage);
        assert_eq!(read.len(), 15);
    }

    #[test]
    fn a_setting_that_means_nothing_is_refused_before_anything_starts() {
        // A misspelt section would run none and print empty tables.
        let refused = parse(&["--only=ingset"]).unwrap_err();
        assert_eq!(refused.kind(), clap::error::ErrorKind::InvalidValue);
        let text = refused.to_string();
        assert!(
            text.contains("'ingset'") && text.contains("config-api, ingest, consumer, pipeline"),
            "{text}"
        );
        let all = <Section as clap::ValueEnum>::value_variants();
        for section in all.iter().copied() {
            let name = clap::ValueEnum::to_possible_value(&section).unwrap();
            let only = parse(&["--only", name.get_name()]).unwrap();
            assert!(all.iter().all(|s| only.wanted(*s) == (*s == section)));
        }
        for value in ["yes", "true", "2", "off"] {
            let refused = parse(&["--peers", value]).unwrap_err();
            assert_eq!(refused.kind(), clap::error::ErrorKind::ValueValidation);
        }
    }

    #[test]
    fn a_count_that_is_not_whole_is_refused_by_name() {
        for (flag, value) in [("--seconds", "2.5"), ("--consumer-rounds", "three")] {
            let refused = parse(&[flag, value]).unwrap_err();
            assert_eq!(refused.kind(), clap::error::ErrorKind::ValueValidation);
            let text = refused.to_string();
            assert!(text.contains(flag) && text.contains(value), "{text}");
        }
    }

    #[test]
    fn each_wanted_section_needs_its_peer() {
        let all = |p: Probe<'_>| !matches!(p, Probe::Command("none"));
        let edge = ["--peers=1", "--unleash-edge=/opt/edge"];
        assert!(parse(&[]).unwrap().check_peers(&|_| false).is_ok());
        assert_eq!(
            parse(&["--peers=1"]).unwrap().check_peers(&all),
            Err(
                "BENCH_PEERS=1 needs BENCH_UNLEASH_EDGE, the path of the peer's binary \
                 (docs/benchmarks.md, Peers)"
                    .to_owned()
            )
        );
        assert!(
            parse(&edge)
                .unwrap()
                .check_peers(&all)
                .unwrap_err()
                .contains("BENCH_POSTHOG_CAPTURE")
        );
        let only_consumer = parse(&["--peers=1", "--only=consumer"]).unwrap();
        assert!(only_consumer.check_peers(&all).is_ok());
        assert_eq!(only_consumer.librdkafka(), Path::new("/librdkafka.so.1"));
        let no_file = |p: Probe<'_>| !matches!(p, Probe::File(_));
        assert!(
            only_consumer
                .check_peers(&no_file)
                .unwrap_err()
                .contains("BENCH_CLICKHOUSE_LIBRDKAFKA")
        );
        let capture = [
            "--peers=1",
            "--only=ingest",
            "--posthog-capture=/opt/capture",
        ];
        let no_redis = |p: Probe<'_>| !matches!(p, Probe::Command("redis-server"));
        assert_eq!(
            parse(&capture).unwrap().check_peers(&no_redis),
            Err("PostHog capture needs redis-server (Debian's)".to_owned())
        );
        assert!(probe(Probe::Command("sh")));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("peer");
        std::fs::write(&file, "").unwrap();
        assert!(probe(Probe::File(&file)));
        assert!(!probe(Probe::Executable(&file)));
        assert!(!probe(Probe::Executable(dir.path())));
        assert!(!probe(Probe::File(dir.path())));
    }
}

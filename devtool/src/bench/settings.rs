//! What `scripts/bench` is told through its environment (`scripts/bench --help` lists it),
//! read once into typed settings before anything starts: an empty variable counts as unset,
//! as `${VAR:-default}` had it, and a count that is not a whole number is refused, naming
//! the variable. The peers' binaries are checked here too, before any server starts.

use std::path::{Path, PathBuf};

/// The run's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Rounds of the config-api and ingest series (`BENCH_ROUNDS`).
    pub rounds: u64,
    /// Rounds of the consumer series (`BENCH_CONSUMER_ROUNDS`).
    pub consumer_rounds: u64,
    /// Seconds measured per round (`BENCH_SECONDS`).
    pub seconds: u64,
    /// The config-api's connections (`BENCH_CONNECTIONS`).
    pub connections: u64,
    /// The ingest's connections (`BENCH_INGEST_CONNECTIONS`).
    pub ingest_connections: u64,
    /// Events of the consumer's backlog (`BENCH_BACKLOG_EVENTS`).
    pub backlog: u64,
    /// Events per raw producer round (`BENCH_PRODUCE_EVENTS`).
    pub produce_events: u64,
    /// fetch.wait.max.ms of the readers of the benchmark's broker (`BENCH_FETCH_WAIT_MS`).
    pub fetch_wait_ms: u64,
    /// The one section to run (`BENCH_ONLY`); every section without it.
    pub only: Option<Section>,
    /// The whole pipeline's rates, as `loadgen pipeline --rates` takes them.
    pub pipeline_rates: String,
    /// Seconds per rate of the whole pipeline (`BENCH_PIPELINE_SECONDS`).
    pub pipeline_seconds: u64,
    /// The peers measured too (`BENCH_PEERS=1`; `0` or unset: not).
    pub peers: Option<Peers>,
    /// `EXPERIMENTS_SNAPSHOT` as given, the demo snapshot without it.
    pub snapshot: Option<PathBuf>,
}

/// A section of a run: what `BENCH_ONLY` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    ConfigApi,
    Ingest,
    Consumer,
    Pipeline,
}

impl Section {
    /// Every section, in the order a run takes them.
    pub const ALL: [Section; 4] = [
        Section::ConfigApi,
        Section::Ingest,
        Section::Consumer,
        Section::Pipeline,
    ];

    /// The section `BENCH_ONLY` names; the refusal names them all.
    fn named(name: String) -> Result<Section, String> {
        Section::ALL
            .into_iter()
            .find(|section| section.name() == name)
            .ok_or_else(|| {
                let names = Section::ALL.map(Section::name).join(", ");
                format!("BENCH_ONLY must be one of {names}, not '{name}'")
            })
    }

    /// Its name in `BENCH_ONLY`.
    pub fn name(self) -> &'static str {
        match self {
            Section::ConfigApi => "config-api",
            Section::Ingest => "ingest",
            Section::Consumer => "consumer",
            Section::Pipeline => "pipeline",
        }
    }
}

/// Where the peers' binaries are, as given (checked by [`Settings::check_peers`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Peers {
    pub unleash_edge: Option<PathBuf>,
    pub posthog_capture: Option<PathBuf>,
    pub clickhouse_librdkafka: Option<PathBuf>,
}

impl Settings {
    /// Reads the environment through `env`; the message names the variable refused.
    pub fn parse(env: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let var = |name: &str| env(name).filter(|v| !v.is_empty());
        let count = |name: &str, default: u64| -> Result<u64, String> {
            match var(name) {
                None => Ok(default),
                Some(text) => text
                    .parse()
                    .map_err(|_| format!("{name} must be a whole number, not '{text}'")),
            }
        };
        let path = |name: &str| var(name).map(PathBuf::from);
        let only = var("BENCH_ONLY").map(Section::named).transpose()?;
        let peers = match var("BENCH_PEERS").as_deref() {
            None | Some("0") => false,
            Some("1") => true,
            Some(text) => return Err(format!("BENCH_PEERS must be 0 or 1, not '{text}'")),
        };
        Ok(Self {
            rounds: count("BENCH_ROUNDS", 5)?,
            consumer_rounds: count("BENCH_CONSUMER_ROUNDS", 3)?,
            seconds: count("BENCH_SECONDS", 10)?,
            connections: count("BENCH_CONNECTIONS", 64)?,
            ingest_connections: count("BENCH_INGEST_CONNECTIONS", 256)?,
            backlog: count("BENCH_BACKLOG_EVENTS", 1_000_000)?,
            produce_events: count("BENCH_PRODUCE_EVENTS", 2_000_000)?,
            fetch_wait_ms: count("BENCH_FETCH_WAIT_MS", 5)?,
            only,
            pipeline_rates: var("BENCH_PIPELINE_RATES")
                .unwrap_or_else(|| "2000,5000,10000,15000,20000,30000,40000".to_owned()),
            pipeline_seconds: count("BENCH_PIPELINE_SECONDS", 30)?,
            peers: peers.then(|| Peers {
                unleash_edge: path("BENCH_UNLEASH_EDGE"),
                posthog_capture: path("BENCH_POSTHOG_CAPTURE"),
                clickhouse_librdkafka: path("BENCH_CLICKHOUSE_LIBRDKAFKA"),
            }),
            snapshot: path("EXPERIMENTS_SNAPSHOT"),
        })
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
        let Some(peers) = &self.peers else {
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
            .peers
            .as_ref()
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
    use std::collections::HashMap;

    fn parse(env: &[(&str, &str)]) -> Result<Settings, String> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::parse(|name| env.get(name).cloned())
    }

    #[test]
    fn defaults_are_those_of_the_usage_and_empty_is_unset() {
        let settings = parse(&[("BENCH_ROUNDS", ""), ("BENCH_PEERS", "")]).unwrap();
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
                peers: None,
                snapshot: None,
            }
        );
        let settings = parse(&[
            ("BENCH_ROUNDS", "1"),
            ("BENCH_CONSUMER_ROUNDS", "2"),
            ("BENCH_SECONDS", "3"),
            ("BENCH_PIPELINE_RATES", "2000,5000"),
            ("BENCH_ONLY", "ingest"),
            ("BENCH_PEERS", "1"),
            ("BENCH_UNLEASH_EDGE", "/opt/edge"),
        ])
        .unwrap();
        assert_eq!(
            (settings.rounds, settings.consumer_rounds, settings.seconds),
            (1, 2, 3)
        );
        assert_eq!(settings.pipeline_rates, "2000,5000");
        let peers = settings.peers.clone().unwrap();
        assert_eq!(peers.unleash_edge, Some(PathBuf::from("/opt/edge")));
        assert!(settings.wanted(Section::Ingest));
        assert!(!settings.wanted(Section::ConfigApi));
        assert!(parse(&[]).unwrap().wanted(Section::Pipeline));
        // 0 is off, as an experienced user reads it, and so is unset.
        let off = parse(&[("BENCH_PEERS", "0"), ("BENCH_UNLEASH_EDGE", "/opt/edge")]).unwrap();
        assert_eq!(off.peers, None);
    }

    #[test]
    fn a_setting_that_means_nothing_is_refused_before_anything_starts() {
        // A misspelt section would run none and print empty tables.
        let refused = parse(&[("BENCH_ONLY", "ingset")]).unwrap_err();
        assert_eq!(
            refused,
            "BENCH_ONLY must be one of config-api, ingest, consumer, pipeline, not 'ingset'"
        );
        for section in Section::ALL {
            let only = parse(&[("BENCH_ONLY", section.name())]).unwrap();
            assert!(
                Section::ALL
                    .iter()
                    .all(|s| only.wanted(*s) == (*s == section))
            );
        }
        for value in ["yes", "true", "2", "off"] {
            let refused = parse(&[("BENCH_PEERS", value)]).unwrap_err();
            assert_eq!(
                refused,
                format!("BENCH_PEERS must be 0 or 1, not '{value}'")
            );
        }
    }

    #[test]
    fn a_count_that_is_not_whole_is_refused_by_name() {
        assert_eq!(
            parse(&[("BENCH_SECONDS", "2.5")]).unwrap_err(),
            "BENCH_SECONDS must be a whole number, not '2.5'"
        );
        assert_eq!(
            parse(&[("BENCH_CONSUMER_ROUNDS", "three")]).unwrap_err(),
            "BENCH_CONSUMER_ROUNDS must be a whole number, not 'three'"
        );
    }

    #[test]
    fn each_wanted_section_needs_its_peer() {
        let all = |p: Probe<'_>| !matches!(p, Probe::Command("none"));
        let edge = [("BENCH_PEERS", "1"), ("BENCH_UNLEASH_EDGE", "/opt/edge")];
        assert!(parse(&[]).unwrap().check_peers(&|_| false).is_ok());
        assert_eq!(
            parse(&[("BENCH_PEERS", "1")]).unwrap().check_peers(&all),
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
        let only_consumer = parse(&[("BENCH_PEERS", "1"), ("BENCH_ONLY", "consumer")]).unwrap();
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
            ("BENCH_PEERS", "1"),
            ("BENCH_ONLY", "ingest"),
            ("BENCH_POSTHOG_CAPTURE", "/opt/capture"),
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

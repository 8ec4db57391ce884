//! What `scripts/chaos` is told, checked before anything starts or is written: SECONDS and
//! its environment become typed settings, or a usage error naming what is wrong. From the
//! topology follow the fault kinds of a round, the services watched and their memory bounds.

use std::fmt;
use std::time::Duration;

/// A refusal of `scripts/chaos`'s arguments or environment (exit 2).
#[derive(Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scripts/chaos: {}\nscripts/chaos --help shows the usage.",
            self.0
        )
    }
}

/// Where the pipeline's ClickHouse runs: one server, or scripts/up's cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    Single,
    Cluster,
}

impl Topology {
    pub fn name(self) -> &'static str {
        match self {
            Topology::Single => "single",
            Topology::Cluster => "cluster",
        }
    }
}

/// The run's settings, as `scripts/chaos --help` describes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Seconds of load.
    pub seconds: u64,
    /// Seconds a SIGSTOP lasts (`CHAOS_PAUSE`).
    pub pause: u64,
    /// `INGEST_DELIVERY_TIMEOUT_MS` handed to the services.
    pub delivery_ms: u64,
    /// `CLICKHOUSE_INSERT_TIMEOUT_MS` handed to the services.
    pub insert_ms: u64,
    /// `KAFKA_SESSION_TIMEOUT_MS` handed to the consumer: how soon a killed consumer's
    /// partitions are given to its successor.
    pub session_ms: u64,
    pub topology: Topology,
}

/// A whole number of at most six digits (leading zeros allowed), as the script has always
/// taken them.
fn count(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 6 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl Settings {
    /// Checks the arguments (SECONDS at most) and the environment, in the order the usage
    /// lists them; an empty variable counts as unset.
    pub fn parse(
        args: &[String],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, UsageError> {
        let refuse = |message: String| Err(UsageError(message));
        let var = |name: &str, default: &str| {
            env(name)
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_owned())
        };
        if args.len() > 1 {
            return refuse(format!(
                "one argument at most (SECONDS), got {}: {}",
                args.len(),
                args.join(" ")
            ));
        }
        let text = args.first().map_or("600", String::as_str);
        let Some(seconds) = count(text) else {
            return refuse(format!(
                "SECONDS must be a whole number of seconds, not '{text}'"
            ));
        };
        if seconds < 30 {
            return refuse(
                "SECONDS must be at least 30 (every fault kind must fit in the load)".to_owned(),
            );
        }
        let text = var("CHAOS_PAUSE", "5");
        let Some(pause) = count(&text) else {
            return refuse(format!(
                "CHAOS_PAUSE must be a whole number of seconds, not '{text}'"
            ));
        };
        let mut timeouts = [0; 3];
        for ((name, default), slot) in [
            ("INGEST_DELIVERY_TIMEOUT_MS", "2000"),
            ("CLICKHOUSE_INSERT_TIMEOUT_MS", "2000"),
            ("KAFKA_SESSION_TIMEOUT_MS", "15000"),
        ]
        .into_iter()
        .zip(&mut timeouts)
        {
            let text = var(name, default);
            let Some(ms) = count(&text) else {
                return refuse(format!(
                    "{name} must be a whole number of milliseconds, not '{text}'"
                ));
            };
            *slot = ms;
        }
        let [delivery_ms, insert_ms, session_ms] = timeouts;
        // A request answers 503 once librdkafka times its events out, which it checks about
        // once a second after the delivery timeout: a pause shorter than that + 2 s may
        // draw none.
        if pause * 1000 < delivery_ms + 2000 || pause * 1000 < insert_ms + 1000 {
            return refuse(format!(
                "CHAOS_PAUSE={pause} s does not outlast the delivery timeout ({delivery_ms} ms) \
                 + 2 s and the insert timeout ({insert_ms} ms) + 1 s"
            ));
        }
        // A paused broker or ClickHouse must not cost the consumer its group membership.
        if session_ms < pause * 1000 + 5000 {
            return refuse(format!(
                "KAFKA_SESSION_TIMEOUT_MS={session_ms} does not outlast CHAOS_PAUSE={pause} s \
                 by 5 s"
            ));
        }
        let topology = match var("CLICKHOUSE_TOPOLOGY", "single").as_str() {
            "single" => Topology::Single,
            "cluster" => Topology::Cluster,
            other => {
                return refuse(format!(
                    "CLICKHOUSE_TOPOLOGY must be single or cluster, not '{other}'"
                ));
            }
        };
        Ok(Self {
            seconds,
            pause,
            delivery_ms,
            insert_ms,
            session_ms,
            topology,
        })
    }

    pub fn pause(&self) -> Duration {
        Duration::from_secs(self.pause)
    }
}

/// A fault the nemesis injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    ClickhouseHang,
    ClickhouseRestart,
    ZookeeperPause,
    BrokerPause,
    IngestRestart,
    SnapshotChange,
    BrokerRestart,
    ConsumerKill,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::ClickhouseHang => "clickhouse-hang",
            Fault::ClickhouseRestart => "clickhouse-restart",
            Fault::ZookeeperPause => "zookeeper-pause",
            Fault::BrokerPause => "broker-pause",
            Fault::IngestRestart => "ingest-restart",
            Fault::SnapshotChange => "snapshot-change",
            Fault::BrokerRestart => "broker-restart",
            Fault::ConsumerKill => "consumer-kill",
        }
    }
}

/// The faults of a round, in order: the ClickHouse faults while the consumer is steady
/// (they must show insert retries), the consumer's kill last (Tansu may leave the restarted
/// member without partitions for most of a minute, docs/operating.md, "The consumer:
/// delivery guarantees").
pub fn round(topology: Topology) -> Vec<Fault> {
    let mut faults = vec![Fault::ClickhouseHang, Fault::ClickhouseRestart];
    if topology == Topology::Cluster {
        faults.push(Fault::ZookeeperPause);
    }
    faults.extend([
        Fault::BrokerPause,
        Fault::IngestRestart,
        Fault::SnapshotChange,
        Fault::BrokerRestart,
        Fault::ConsumerKill,
    ]);
    faults
}

/// The ClickHouse servers a ClickHouse fault hits, each in turn: the single server, or
/// `ch1`…`ch4` of the cluster.
pub fn clickhouses(topology: Topology) -> Vec<String> {
    match topology {
        Topology::Single => vec!["clickhouse".to_owned()],
        Topology::Cluster => (1..=stack_kit::clickhouse::CLUSTER_SERVERS)
            .map(|n| format!("ch{n}"))
            .collect(),
    }
}

/// Every service whose memory is sampled, in the summary's order.
pub fn services(topology: Topology) -> Vec<String> {
    let mut services: Vec<String> = ["ingest", "config-api", "consumer", "tansu"]
        .map(str::to_owned)
        .into();
    services.extend(clickhouses(topology));
    if topology == Topology::Cluster {
        services.push("zookeeper".to_owned());
    }
    services
}

/// Largest growth of a process's resident memory (its last sample less its first) that a
/// sound run stays under, in MiB; docs/reliability.md explains each.
pub fn rss_bound_mib(service: &str) -> u64 {
    match service {
        "ingest" => 16,
        "config-api" => 8,
        "consumer" => 128,
        "tansu" => 256,
        "zookeeper" => 384,
        // Each ClickHouse server.
        _ => 1024,
    }
}

/// The faults are spread evenly: fault `i` is due `(i + 1) × every` seconds into the load.
pub fn every(seconds: u64, faults: usize) -> u64 {
    (seconds / (faults as u64 + 1)).max(3)
}

/// When fault `i` starts, from the load's start: when it is due, or `elapsed` if that has
/// passed (the faults before it took longer); `None` when it could not end before the load
/// does (a pause after it starts), which ends the nemesis.
pub fn due(i: u64, every: u64, elapsed: Duration, settings: &Settings) -> Option<Duration> {
    let due = Duration::from_secs((i + 1) * every).max(elapsed);
    (due + settings.pause() < Duration::from_secs(settings.seconds)).then_some(due)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Settings, UsageError> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        Settings::parse(&args, |name| env.get(name).cloned())
    }

    fn refusal(args: &[&str], env: &[(&str, &str)]) -> String {
        parse(args, env).unwrap_err().0
    }

    #[test]
    fn defaults_and_leading_zeros() {
        let settings = parse(&[], &[("CHAOS_PAUSE", "")]).unwrap();
        assert_eq!(
            settings,
            Settings {
                seconds: 600,
                pause: 5,
                delivery_ms: 2000,
                insert_ms: 2000,
                session_ms: 15000,
                topology: Topology::Single
            }
        );
        let settings = parse(
            &["090"],
            &[
                ("CLICKHOUSE_TOPOLOGY", "cluster"),
                ("CHAOS_PAUSE", "07"),
                ("INGEST_DELIVERY_TIMEOUT_MS", "03000"),
            ],
        )
        .unwrap();
        assert_eq!(
            (settings.seconds, settings.pause, settings.delivery_ms),
            (90, 7, 3000)
        );
        assert_eq!(settings.topology, Topology::Cluster);
    }

    #[test]
    fn each_refusal_names_what_is_wrong() {
        assert_eq!(
            refusal(&["60", "--x"], &[]),
            "one argument at most (SECONDS), got 2: 60 --x"
        );
        assert_eq!(
            refusal(&["--no-such-option"], &[]),
            "SECONDS must be a whole number of seconds, not '--no-such-option'"
        );
        assert_eq!(
            refusal(&["1234567"], &[]),
            "SECONDS must be a whole number of seconds, not '1234567'"
        );
        assert_eq!(
            refusal(&["29"], &[]),
            "SECONDS must be at least 30 (every fault kind must fit in the load)"
        );
        assert_eq!(
            refusal(&["60"], &[("CHAOS_PAUSE", "1.5")]),
            "CHAOS_PAUSE must be a whole number of seconds, not '1.5'"
        );
        assert_eq!(
            refusal(&["60"], &[("CLICKHOUSE_INSERT_TIMEOUT_MS", "2s")]),
            "CLICKHOUSE_INSERT_TIMEOUT_MS must be a whole number of milliseconds, not '2s'"
        );
        assert_eq!(
            refusal(&["60"], &[("CHAOS_PAUSE", "3")]),
            "CHAOS_PAUSE=3 s does not outlast the delivery timeout (2000 ms) + 2 s and the \
             insert timeout (2000 ms) + 1 s"
        );
        // The insert timeout alone can be the one a pause does not outlast.
        assert!(parse(&["60"], &[("CLICKHOUSE_INSERT_TIMEOUT_MS", "4001")]).is_err());
        assert!(parse(&["60"], &[("CLICKHOUSE_INSERT_TIMEOUT_MS", "4000")]).is_ok());
        assert_eq!(
            refusal(&["60"], &[("KAFKA_SESSION_TIMEOUT_MS", "9999")]),
            "KAFKA_SESSION_TIMEOUT_MS=9999 does not outlast CHAOS_PAUSE=5 s by 5 s"
        );
        assert!(parse(&["60"], &[("KAFKA_SESSION_TIMEOUT_MS", "10000")]).is_ok());
        assert_eq!(
            refusal(&["60"], &[("CLICKHOUSE_TOPOLOGY", "sharded")]),
            "CLICKHOUSE_TOPOLOGY must be single or cluster, not 'sharded'"
        );
        assert_eq!(
            UsageError("x".to_owned()).to_string(),
            "scripts/chaos: x\nscripts/chaos --help shows the usage."
        );
    }

    #[test]
    fn a_round_and_its_services_per_topology() {
        let names = |t| {
            round(t)
                .iter()
                .map(|f| f.name())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            names(Topology::Single),
            "clickhouse-hang clickhouse-restart broker-pause ingest-restart snapshot-change \
             broker-restart consumer-kill"
        );
        assert_eq!(
            names(Topology::Cluster),
            "clickhouse-hang clickhouse-restart zookeeper-pause broker-pause ingest-restart \
             snapshot-change broker-restart consumer-kill"
        );
        assert_eq!(
            services(Topology::Single).join(" "),
            "ingest config-api consumer tansu clickhouse"
        );
        assert_eq!(
            services(Topology::Cluster).join(" "),
            "ingest config-api consumer tansu ch1 ch2 ch3 ch4 zookeeper"
        );
        let bounds: Vec<u64> = services(Topology::Cluster)
            .iter()
            .map(|s| rss_bound_mib(s))
            .collect();
        assert_eq!(bounds, [16, 8, 128, 256, 1024, 1024, 1024, 1024, 384]);
    }

    #[test]
    fn faults_are_spread_over_the_load_and_end_before_it() {
        let settings = parse(&["90"], &[]).unwrap();
        let single = every(90, round(Topology::Single).len());
        assert_eq!(single, 11);
        let on_time: Vec<u64> = (0..)
            .map_while(|i| due(i, single, Duration::ZERO, &settings))
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(on_time, [11, 22, 33, 44, 55, 66, 77]);
        assert_eq!(every(90, round(Topology::Cluster).len()), 10);
        // A fault whose turn has passed starts at once, unless it could not end in time.
        let late = Duration::from_secs(40);
        assert_eq!(due(0, single, late, &settings), Some(late));
        assert_eq!(due(0, single, Duration::from_secs(85), &settings), None);
        assert!(due(0, single, Duration::from_millis(84_999), &settings).is_some());
        assert_eq!(every(30, 8), 3);
    }
}

//! The `analytics-erase` command: one visitor's or one session's rows removed from every
//! table of the analysts' database that stores them, with `ALTER … DELETE` mutations on
//! each shard's own tables, waited for on every replica until no row is left. A session's
//! visitors keep their other sessions: their aggregate rows are deleted and built again
//! from the events that remain. Erasing twice removes nothing the second time.

use std::time::{Duration, Instant};

use anyhow::Context;
use clickhouse::Client;
use clickhouse_kit::topology::{Server, Topology, first_answering, sip_hash64};
use schema::ServerCaps;
use schema::table_lock::{self, TableLock};

/// Erases one visitor's or one session's rows from the analysts' database.
#[derive(clap::Parser, Clone, Debug)]
#[command(
    version,
    about = "Erases one visitor's (or one session's) rows from every table of the analysts' \
             database and waits until ClickHouse has done it.",
    long_about = "Erases one visitor's (or one session's) rows from every table of the \
                  analysts' database: `events`, the aggregate `experiment_visitors` and any \
                  other table with a visitor_id or session_id column, on every shard of a \
                  cluster. It runs ALTER ... DELETE mutations and waits until every replica \
                  holds no such row, then prints how many rows each table held. A session's \
                  visitors keep their other sessions: their aggregate rows are rebuilt from \
                  the events that remain. Running it again removes nothing.\n\n\
                  Exit codes: 0 done (or nothing to erase), 2 an id refused (empty, blank, \
                  wildcard-looking), 1 any other failure (run it again: it is idempotent)."
)]
pub struct EraseConfig {
    /// The visitor whose rows are erased (the SDK's visitorId, `visitor_id` in ClickHouse).
    #[arg(
        long,
        required_unless_present = "session_id",
        conflicts_with = "session_id"
    )]
    pub visitor_id: Option<String>,

    /// The session whose rows are erased (`session_id`); its visitors' other sessions stay.
    #[arg(long)]
    pub session_id: Option<String>,

    /// Longest wait for ClickHouse to finish the deletions, in seconds.
    #[arg(long, default_value_t = 600)]
    pub wait_secs: u64,

    /// Hours the Kafka topics keep a record: the services' KAFKA_RETENTION_HOURS, which
    /// the report gives as the time until the erased events are gone from Kafka too.
    #[arg(
        long,
        env = "KAFKA_RETENTION_HOURS",
        default_value_t = kafka_kit::client::DEFAULT_RETENTION_HOURS
    )]
    pub kafka_retention_hours: u32,

    #[command(flatten)]
    pub clickhouse: clickhouse_kit::ClickHouseArgs,
}

/// Whose rows go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    Visitor(String),
    Session(String),
}

/// An id the command refuses: it could not name one visitor or session.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("refusing {flag} {id:?}: {reason}")]
pub struct RefusedId {
    flag: &'static str,
    id: String,
    reason: &'static str,
}

impl Subject {
    /// The subject of the command line. Ids are compared with `=`, so a wildcard would
    /// match nothing, but an id that looks like one is an operator's mistake: refused,
    /// as are empty and blank ids and ids with control characters.
    pub fn parse(config: &EraseConfig) -> Result<Self, RefusedId> {
        let (flag, id, subject): (_, _, fn(String) -> Self) =
            match (&config.visitor_id, &config.session_id) {
                (Some(id), _) => ("--visitor-id", id, Self::Visitor),
                (None, Some(id)) => ("--session-id", id, Self::Session),
                (None, None) => ("--visitor-id", &String::new(), Self::Visitor),
            };
        let refuse = |reason| {
            Err(RefusedId {
                flag,
                id: id.clone(),
                reason,
            })
        };
        if id.is_empty() {
            return refuse("it is empty");
        }
        if id.trim().is_empty() {
            return refuse("it is blank");
        }
        if id.trim() != id {
            return refuse("it starts or ends with blanks");
        }
        if id.chars().any(|c| matches!(c, '*' | '%' | '?')) {
            return refuse("it looks like a wildcard (*, % or ?); ids are matched exactly");
        }
        if matches!(id.to_ascii_lowercase().as_str(), "all" | "any" | ".*") {
            return refuse("it looks like a wildcard; ids are matched exactly");
        }
        if id.chars().any(char::is_control) {
            return refuse("it holds control characters");
        }
        Ok(subject(id.clone()))
    }

    fn noun(&self) -> &'static str {
        match self {
            Self::Visitor(_) => "visitor",
            Self::Session(_) => "session",
        }
    }

    fn column(&self) -> &'static str {
        match self {
            Self::Visitor(_) => "visitor_id",
            Self::Session(_) => "session_id",
        }
    }

    fn id(&self) -> &str {
        match self {
            Self::Visitor(id) | Self::Session(id) => id,
        }
    }
}

/// What a table holds of the subject, and what erasure does to it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Table {
    /// The name of its shard-local part (`events_local` in a cluster, `events` on one
    /// server).
    name: String,
    action: Action,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Its subject's rows are deleted.
    Delete,
    /// Kept per visitor, without sessions, and stored again by the consumer: a session's
    /// visitors' rows are deleted (`visitor_metric_values`).
    Forget,
    /// A visitor aggregate without sessions: a session's visitors' rows are deleted and
    /// built again from the events left (`experiment_visitors`, `visitor_event_counts`).
    Rebuild,
}

/// The sharded tables keyed by visitor, without sessions, that erasing a session builds
/// again from the events left.
const VISITOR_AGGREGATES: &[&str] = &["experiment_visitors", "visitor_event_counts"];
/// The sharded table keyed by visitor, without sessions, that erasing a session empties
/// of its visitors' rows.
const VISITOR_VALUES: &str = "visitor_metric_values";

/// The tables of the database that hold rows of `subject`, from their columns: every
/// table of the MergeTree family (the others hold no rows of their own: views,
/// Distributed tables) with the subject's column. A table keyed by visitor without a
/// `session_id` cannot lose one session's rows: for a session it must be a visitor
/// aggregate, which is rebuilt, or the stored metric values, which are forgotten; any
/// other such table is refused rather than left holding the session's contribution.
fn tables_of(
    columns: &[(String, String, String)],
    subject: &Subject,
    local: &str,
) -> anyhow::Result<Vec<Table>> {
    let mut names: Vec<&str> = columns
        .iter()
        .filter(|(_, engine, _)| engine.contains("MergeTree"))
        .map(|(table, _, _)| table.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    let has = |table: &str, column: &str| columns.iter().any(|(t, _, c)| t == table && c == column);
    let mut tables = Vec::new();
    for name in names {
        if has(name, subject.column()) {
            tables.push(Table {
                name: name.to_owned(),
                action: Action::Delete,
            });
        } else if matches!(subject, Subject::Session(_)) && has(name, "visitor_id") {
            let base = name.strip_suffix(local).unwrap_or(name);
            let action = if VISITOR_AGGREGATES.contains(&base) {
                Action::Rebuild
            } else if base == VISITOR_VALUES {
                Action::Forget
            } else {
                anyhow::bail!(
                    "table {name} keeps visitors without their sessions: erasing a session \
                     cannot tell which of its rows to take out (erase the visitor instead)"
                );
            };
            tables.push(Table {
                name: name.to_owned(),
                action,
            });
        }
    }
    Ok(tables)
}

/// What an erasure found and removed: rows per table before it, and for a session the
/// visitors whose aggregate rows were rebuilt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Erased {
    /// `(table, rows)`: the rows of the subject each table held (the most any replica of a
    /// shard held, summed over the shards), aggregate rows counted before merges.
    pub rows: Vec<(String, u64)>,
    /// The visitors of an erased session.
    pub rebuilt_visitors: Vec<String>,
    /// The topics' retention (`KAFKA_RETENTION_HOURS`), said in the report.
    pub kafka_retention_hours: Option<u32>,
    /// Databases named as analysts' copies that are not copies, left alone.
    pub not_copies: Vec<String>,
}

impl Erased {
    pub fn total(&self) -> u64 {
        self.rows.iter().map(|(_, n)| n).sum()
    }

    /// The report printed by the command.
    pub fn report(&self, subject: &Subject) -> String {
        let what = match subject {
            Subject::Visitor(id) => format!("visitor {id:?}"),
            Subject::Session(id) => format!("session {id:?}"),
        };
        let mut out = if self.total() == 0 {
            format!("Nothing stored for {what}: nothing erased.\n")
        } else {
            let mut out = format!("Erased {what}; rows each table held before:\n");
            for (table, rows) in &self.rows {
                out.push_str(&format!("  {table}: {rows}\n"));
            }
            if !self.rebuilt_visitors.is_empty() {
                out.push_str(&format!(
                    "Aggregate rows of its visitor(s) rebuilt from their other sessions: {}\n",
                    self.rebuilt_visitors.join(", ")
                ));
            }
            out
        };
        if !self.not_copies.is_empty() {
            out.push_str(&format!(
                "Left alone, named as analysts' copies but not copies (no events table): {}\n",
                self.not_copies.join(", ")
            ));
        }
        // Erasure reaches ClickHouse only: the raw events age out of Kafka (docs/privacy.md).
        if let Some(hours) = self.kafka_retention_hours {
            out.push_str(&format!(
                "Kafka still holds this {}'s raw events until they age out: at most \
                 KAFKA_RETENTION_HOURS={hours} hours (plus up to an hour) after they were \
                 sent (for a dead letter, after it was set aside).\n",
                subject.noun()
            ));
        }
        out
    }
}

/// The prefix of the analysts' copies (`analytics-access` on 18.x): each holds rows of
/// the analysts' database, erased with it.
pub const COPY_PREFIX: &str = "analyst_";

/// Runs the erasure and waits for it: in the analysts' database, then in every analyst's
/// copy of it (a database kept whole on every server: one shard of them all).
pub async fn erase(config: &EraseConfig, subject: &Subject) -> anyhow::Result<Erased> {
    let topology = Topology::from_args(&config.clickhouse)?;
    let database = &config.clickhouse.clickhouse_database;
    anyhow::ensure!(
        database
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
        "database name {database:?} must be letters, digits and _ only"
    );
    let deadline = Instant::now() + Duration::from_secs(config.wait_secs);
    // After a grant's backfill, or before the copy it makes: never beside it.
    let caps = ServerCaps::of(&first_answering(topology.servers()).await?.client).await?;
    let work = erase_everywhere(config, &topology, subject, deadline);
    TableLock::holding(&topology, caps, database, table_lock::ACCESS, work).await
}

/// [`erase`], the lock of the analysts' access held.
async fn erase_everywhere(
    config: &EraseConfig,
    topology: &Topology,
    subject: &Subject,
    deadline: Instant,
) -> anyhow::Result<Erased> {
    let database = &config.clickhouse.clickhouse_database;
    let mut erased = erase_in(topology, database, subject, deadline).await?;
    let first = first_answering(topology.servers()).await?;
    let copies: Vec<String> = first
        .client
        .query("SELECT name FROM system.databases WHERE startsWith(name, ?) ORDER BY name")
        .bind(COPY_PREFIX)
        .fetch_all()
        .await
        .context("cannot list the analysts' copies")?;
    let whole = Topology {
        cluster: None,
        shards: vec![topology.servers().cloned().collect()],
    };
    // Anyone allowed to create a database can name one `analyst_…`: one that is not a copy
    // is left alone, and one that fails stops no other copy's erasure.
    let mut failed = Vec::new();
    for copy in copies {
        if !is_copy(&first.client, &copy).await? {
            erased.not_copies.push(copy);
            continue;
        }
        match erase_in(&whole, &copy, subject, deadline).await {
            Ok(found) => erased.rows.extend(
                found
                    .rows
                    .into_iter()
                    .map(|(table, n)| (format!("{copy}.{table}"), n)),
            ),
            Err(error) => failed.push(format!("{copy} ({error:#})")),
        }
    }
    anyhow::ensure!(
        failed.is_empty(),
        "the {} is erased from {database} and from every other analysts' copy, but not \
         from: {}. Fix or drop those copies and run the erasure again: it is safe to repeat",
        subject.noun(),
        failed.join("; ")
    );
    erased.kafka_retention_hours = Some(config.kafka_retention_hours);
    Ok(erased)
}

/// Whether `database` is an analysts' copy: the schema's record of migrations and
/// `events`, as `schema::migrate_copy` makes them.
async fn is_copy(client: &clickhouse::Client, database: &str) -> anyhow::Result<bool> {
    let tables: u64 = client
        .query(
            "SELECT count() FROM system.tables WHERE database = ? \
             AND name IN ('schema_migrations', 'events')",
        )
        .bind(database)
        .fetch_one()
        .await
        .with_context(|| format!("cannot list the tables of {database}"))?;
    Ok(tables == 2)
}

/// Erases `subject` from `database` laid out as `topology` says.
async fn erase_in(
    topology: &Topology,
    database: &str,
    subject: &Subject,
    deadline: Instant,
) -> anyhow::Result<Erased> {
    // Every replica must answer: a mutation is only known done where it can be seen.
    let firsts = {
        let mut firsts = Vec::new();
        for replicas in &topology.shards {
            firsts.push(first_answering(replicas).await?);
        }
        firsts
    };
    let caps = ServerCaps::of(&firsts[0].client).await?;
    let columns = subject_columns(&firsts[0].client, database).await?;
    let tables = tables_of(&columns, subject, topology.local())?;
    let id = subject.id();

    // The visitors of a session, before its events go.
    let mut visitors: Vec<String> = Vec::new();
    if matches!(subject, Subject::Session(_)) {
        for server in topology.servers() {
            let found: Vec<String> = server
                .client
                .query(&format!(
                    "SELECT DISTINCT visitor_id FROM {database}.events{} \
                     WHERE sipHash64(session_id) = ?",
                    topology.local()
                ))
                .bind(sip_hash64(id.as_bytes()))
                .fetch_all()
                .await
                .with_context(|| format!("cannot read the session's visitors on {}", server.url))?;
            visitors.extend(found);
        }
        visitors.sort_unstable();
        visitors.dedup();
    }

    let mut erased = Erased {
        rebuilt_visitors: visitors.clone(),
        ..Erased::default()
    };
    // By the ids' hashes, not the ids, in every statement: a mutation's text stays in
    // `system.mutations` and, in a cluster, in ZooKeeper (which `system.zookeeper` shows to
    // any user of 18.x), and every query's text is in `system.processes` while it runs and
    // in `system.query_log` after, which 18.x shows to every user. SipHash's 64 bits make another visitor's match
    // negligible (about one in 10^10 for a billion visitors).
    let condition = |table: &Table| match table.action {
        Action::Delete => format!("sipHash64({}) = ?", subject.column()),
        Action::Forget | Action::Rebuild => "has(?, sipHash64(visitor_id))".to_owned(),
    };
    let visitor_hashes: Vec<u64> = visitors.iter().map(|v| sip_hash64(v.as_bytes())).collect();
    let bind = |query: clickhouse::query::Query, table: &Table| match table.action {
        Action::Delete => query.bind(sip_hash64(id.as_bytes())),
        Action::Forget | Action::Rebuild => query.bind(visitor_hashes.clone()),
    };
    // Deletions first (the events), then the rebuilt aggregates from what is left.
    for pass in [Action::Delete, Action::Forget, Action::Rebuild] {
        for table in tables.iter().filter(|t| t.action == pass) {
            if table.action != Action::Delete && visitors.is_empty() {
                // The session has no events left: no visitor to rebuild.
                erased.rows.push((table.name.clone(), 0));
                continue;
            }
            let mut held = 0;
            for (shard, replicas) in topology.shards.iter().enumerate() {
                let count_sql = count_statement(database, &table.name, &condition(table));
                let mut most = 0;
                for server in replicas {
                    let n: u64 = bind(server.client.query(&count_sql), table)
                        .fetch_one()
                        .await
                        .with_context(|| {
                            format!("cannot count {} on {}", table.name, server.url)
                        })?;
                    most = most.max(n);
                }
                held += most;
                if most == 0 {
                    continue;
                }
                let first = firsts[shard];
                bind(
                    first
                        .client
                        .query(&delete_statement(database, &table.name, &condition(table))),
                    table,
                )
                .execute()
                .await
                .with_context(|| format!("cannot erase from {} on {}", table.name, first.url))?;
                for server in replicas {
                    wait_until_gone(server, database, table, &count_sql, deadline, |q| {
                        bind(q, table)
                    })
                    .await?;
                }
            }
            erased.rows.push((table.name.clone(), held));
            if table.action == Action::Rebuild {
                let sql = rebuild_statement(caps, topology, database, &table.name);
                for (first, replicas) in firsts.iter().zip(&topology.shards) {
                    let mut query = first
                        .client
                        .query(&sql)
                        .bind(visitor_hashes.clone())
                        // A rebuilt block may equal one the replicas saw before.
                        .with_setting("insert_deduplicate", "0");
                    if let Some((name, value)) = schema::required_settings(caps) {
                        query = query.with_setting(name, value);
                    }
                    query.execute().await.with_context(|| {
                        format!("cannot rebuild {} on {}", table.name, first.url)
                    })?;
                    // Done once every replica has the rebuilt rows, as for the deletions.
                    for other in replicas.iter().filter(|r| r.url != first.url) {
                        other
                            .client
                            .query(&format!("SYSTEM SYNC REPLICA {database}.`{}`", table.name))
                            .execute()
                            .await
                            .with_context(|| {
                                format!("{} on {} did not catch up", table.name, other.url)
                            })?;
                    }
                }
            }
        }
    }
    Ok(erased)
}

/// The statement that builds again, on a shard, the rows of sharded aggregate `table` (its
/// shard-local name) of the visitors bound to `?`.
fn rebuild_statement(caps: ServerCaps, topology: &Topology, database: &str, table: &str) -> String {
    let cluster = topology.cluster.as_deref();
    // The hashes of the visitors, as the deletions of `Forget` select them.
    let filter = "has(?, sipHash64(visitor_id))";
    if table.strip_suffix(topology.local()).unwrap_or(table) == "experiment_visitors" {
        schema::visitors_rebuild(caps, cluster, database, filter)
    } else {
        format!(
            "INSERT INTO {database}.{table} {}",
            schema::event_counts_select(caps, cluster, database, filter)
        )
    }
}

/// The rows of `table` that `condition` selects (`sipHash64(visitor_id) = ?`, ...).
pub fn count_statement(database: &str, table: &str, condition: &str) -> String {
    format!("SELECT count() FROM {database}.`{table}` WHERE {condition}")
}

/// The mutation that deletes them.
pub fn delete_statement(database: &str, table: &str, condition: &str) -> String {
    format!("ALTER TABLE {database}.`{table}` DELETE WHERE {condition}")
}

/// `(table, engine, column)` for each `visitor_id` and `session_id` column of the
/// database's tables.
async fn subject_columns(
    client: &Client,
    database: &str,
) -> anyhow::Result<Vec<(String, String, String)>> {
    let engines: Vec<(String, String)> = client
        .query("SELECT name, engine FROM system.tables WHERE database = ?")
        .bind(database)
        .fetch_all()
        .await
        .context("cannot list the tables")?;
    let columns: Vec<(String, String)> = client
        .query(
            "SELECT table, name FROM system.columns WHERE database = ? \
             AND name IN ('visitor_id', 'session_id')",
        )
        .bind(database)
        .fetch_all()
        .await
        .context("cannot read the tables' columns")?;
    Ok(columns
        .into_iter()
        .filter_map(|(table, column)| {
            let (_, engine) = engines.iter().find(|(name, _)| *name == table)?;
            Some((table, engine.clone(), column))
        })
        .collect())
}

/// Polls one replica until it holds no row of the subject in `table` and has no mutation
/// of it left to do, or the deadline passes.
async fn wait_until_gone(
    server: &Server,
    database: &str,
    table: &Table,
    count_sql: &str,
    deadline: Instant,
    bind: impl Fn(clickhouse::query::Query) -> clickhouse::query::Query,
) -> anyhow::Result<()> {
    loop {
        let left: u64 = bind(server.client.query(count_sql))
            .fetch_one()
            .await
            .with_context(|| format!("cannot count {} on {}", table.name, server.url))?;
        let pending: u64 = server
            .client
            .query(
                "SELECT count() FROM system.mutations \
                 WHERE database = ? AND table = ? AND is_done = 0",
            )
            .bind(database)
            .bind(&table.name)
            .fetch_one()
            .await
            .with_context(|| format!("cannot read system.mutations on {}", server.url))?;
        if left == 0 && pending == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} on {} still holds {left} row(s) with {pending} mutation(s) pending: \
             the server may still finish them; run the command again to check",
            table.name,
            server.url
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<Subject, RefusedId> {
        let config = EraseConfig::try_parse_from(["analytics-erase"].iter().chain(args))
            .expect("arguments parse");
        Subject::parse(&config)
    }

    #[test]
    fn ids_are_taken_exactly_and_nonsense_is_refused() {
        assert_eq!(
            parse(&["--visitor-id", "v_1-a.b"]),
            Ok(Subject::Visitor("v_1-a.b".into()))
        );
        assert_eq!(
            parse(&["--session-id", "s1"]),
            Ok(Subject::Session("s1".into()))
        );
        for bad in ["", "  ", " v1", "*", "v%", "a?", "ALL", "v\n1"] {
            let refused = parse(&["--visitor-id", bad]).expect_err(bad);
            assert!(
                refused.to_string().contains("refusing --visitor-id"),
                "{refused}"
            );
        }
        assert!(EraseConfig::try_parse_from(["analytics-erase"]).is_err());
        assert!(
            EraseConfig::try_parse_from([
                "analytics-erase",
                "--visitor-id",
                "v",
                "--session-id",
                "s"
            ])
            .is_err()
        );
    }

    fn columns(list: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
        list.iter()
            .map(|(t, e, c)| ((*t).into(), (*e).into(), (*c).into()))
            .collect()
    }

    #[test]
    fn tables_follow_their_columns() {
        let cols = columns(&[
            ("events_local", "ReplicatedReplacingMergeTree", "session_id"),
            ("events_local", "ReplicatedReplacingMergeTree", "visitor_id"),
            ("events", "Distributed", "visitor_id"),
            (
                "experiment_visitors_local",
                "ReplicatedAggregatingMergeTree",
                "visitor_id",
            ),
            (
                "visitor_event_counts_local",
                "ReplicatedSummingMergeTree",
                "visitor_id",
            ),
            (
                "visitor_metric_values_local",
                "ReplicatedReplacingMergeTree",
                "visitor_id",
            ),
        ]);
        let visitor = tables_of(&cols, &Subject::Visitor("v".into()), "_local").expect("ok");
        assert_eq!(
            visitor
                .iter()
                .map(|t| (t.name.as_str(), t.action))
                .collect::<Vec<_>>(),
            [
                ("events_local", Action::Delete),
                ("experiment_visitors_local", Action::Delete),
                ("visitor_event_counts_local", Action::Delete),
                ("visitor_metric_values_local", Action::Delete),
            ]
        );
        let session = tables_of(&cols, &Subject::Session("s".into()), "_local").expect("ok");
        assert_eq!(
            session
                .iter()
                .map(|t| (t.name.as_str(), t.action))
                .collect::<Vec<_>>(),
            [
                ("events_local", Action::Delete),
                ("experiment_visitors_local", Action::Rebuild),
                ("visitor_event_counts_local", Action::Rebuild),
                ("visitor_metric_values_local", Action::Forget),
            ]
        );
        let mut other = cols.clone();
        other.extend(columns(&[(
            "visitor_daily",
            "AggregatingMergeTree",
            "visitor_id",
        )]));
        assert!(tables_of(&other, &Subject::Session("s".into()), "_local").is_err());
        assert_eq!(
            tables_of(&other, &Subject::Visitor("v".into()), "_local")
                .expect("ok")
                .len(),
            5
        );
    }
}

//! ClickHouse's Kafka table engine as the consumer's peer (`BENCH_PEERS=1`): a Kafka table
//! reading the ingest's messages (`JSONEachRow`) and materialized views writing them into
//! the consumer's own schema, `events` and every table that a view of `events` fills.
//!
//! ClickHouse 18.16 forces two detours, both measured and found on that server:
//! - A row's `received_at` (seconds, `DateTime`) and `received_at_ms` both come from the
//!   message's `received_at`; a query that names an alias as a column of its source reads
//!   the alias (18.16 has no way around it). So a first view only renames the message's
//!   fields to `<field>_raw`, and the mapping reads those.
//! - Rows that a view of the Kafka table writes into `events` do not reach the views of
//!   `events` (`experiment_visitors_mv`): only views of the Kafka table, and views of those
//!   views, are pushed to. So each view of `events` is copied as a view of the renaming
//!   view, with the same query.
//!
//! The views are made before the Kafka table exists (on a `Null` table of its name, then
//! replaced): streaming starts when the Kafka table has views, and none of its first
//! blocks may reach a chain that is only half made.

use anyhow::Context;
use schema::EventRow;

use crate::clickhouse::ClickHouse;

/// The Kafka table.
const QUEUE: &str = "events_kafka_queue";
/// The view that renames the message's fields to `<field>_raw`.
const RENAMED: &str = "events_kafka";

/// Where the engine reads from and how much it inserts at once.
pub struct Source<'a> {
    pub brokers: &'a str,
    pub topic: &'a str,
    pub group: &'a str,
    /// Rows per insert (`kafka_max_block_size`), as the consumer's `BATCH_MAX_ROWS`.
    pub block_rows: u64,
    /// Consumers reading the topic (`kafka_num_consumers`), at most its partitions.
    pub consumers: u32,
}

/// The message's fields as the Kafka table's columns: the row's columns as the ingest
/// writes them (`received_at` in milliseconds, no `received_at_ms`, `event_time` absent
/// unless the client sent a time, texts as plain `String`), and the format version `v`.
fn queue_columns() -> Vec<(&'static str, &'static str)> {
    let mut columns = vec![("v", "UInt8")];
    for &(name, ty) in EventRow::<String>::COLUMNS {
        let ty = match name {
            "received_at_ms" => continue,
            "received_at" => "Int64",
            "event_time" => "Nullable(Int64)",
            _ if ty == "LowCardinality(String)" => "String",
            _ => ty,
        };
        columns.push((name, ty));
    }
    columns
}

/// A column of `events` from the renamed fields, as `schema/src/row.rs` makes it.
fn row_expression(name: &str, ty: &str) -> String {
    match name {
        "received_at" => "toDateTime(intDiv(received_at_raw, 1000))".into(),
        "received_at_ms" => "received_at_raw".into(),
        "event_time" => "ifNull(event_time_raw, received_at_raw)".into(),
        "visitor_id" => "if(visitor_id_raw = '', session_id_raw, visitor_id_raw)".into(),
        "phase" => "if(phase_raw = 0, toUInt32(1), phase_raw)".into(),
        _ if ty == "LowCardinality(String)" => format!("toLowCardinality({name}_raw)"),
        _ => format!("{name}_raw"),
    }
}

/// `WITH <expression> AS <column>, …`: every column of `events`, for a query that reads
/// the renaming view as if it were `events`.
fn row_aliases() -> String {
    let aliases: Vec<String> = EventRow::<String>::COLUMNS
        .iter()
        .map(|&(name, ty)| format!("{} AS {name}", row_expression(name, ty)))
        .collect();
    format!("WITH {}", aliases.join(", "))
}

/// The Kafka table's columns with `engine`: `Null` for its stand-in, or `Kafka`.
fn queue_table(database: &str, engine: &str) -> String {
    let columns: Vec<String> = queue_columns()
        .iter()
        .map(|(name, ty)| format!("{name} {ty}"))
        .collect();
    format!(
        "CREATE TABLE {database}.{QUEUE} ({}) ENGINE = {engine}",
        columns.join(", ")
    )
}

/// The statements that make the chain up to the Kafka table, which is last.
fn statements(database: &str) -> Vec<String> {
    let queue = queue_columns();
    let renamed: Vec<String> = queue[1..]
        .iter()
        .map(|(name, _)| format!("{name} AS {name}_raw"))
        .collect();
    let row: Vec<&str> = EventRow::<String>::COLUMNS.iter().map(|c| c.0).collect();
    vec![
        queue_table(database, "Null"),
        format!(
            "CREATE MATERIALIZED VIEW {database}.{RENAMED} ENGINE = Null AS SELECT {} FROM {database}.{QUEUE}",
            renamed.join(", ")
        ),
        format!(
            "CREATE MATERIALIZED VIEW {database}.events_from_kafka TO {database}.events AS {} SELECT {} FROM {database}.{RENAMED}",
            row_aliases(),
            row.join(", ")
        ),
    ]
}

/// The Kafka table, in place of its `Null` stand-in.
fn kafka_table(database: &str, source: &Source) -> String {
    let engine = format!(
        "Kafka SETTINGS kafka_broker_list = '{}', kafka_topic_list = '{}', \
         kafka_group_name = '{}', kafka_format = 'JSONEachRow', kafka_max_block_size = {}, \
         kafka_num_consumers = {}",
        source.brokers, source.topic, source.group, source.block_rows, source.consumers
    );
    queue_table(database, &engine)
}

/// A view of `events` (its `SHOW CREATE TABLE`) as a view of the renaming view: same
/// target, same query, reading the renamed fields through [`row_aliases`].
fn view_from_kafka(create: &str, database: &str) -> anyhow::Result<String> {
    let prefix = format!("CREATE MATERIALIZED VIEW {database}.");
    let rest = create
        .strip_prefix(&prefix)
        .with_context(|| format!("not a materialized view of {database}: {create:.80}"))?;
    let (name, rest) = rest.split_once(" TO ").context("a view without TO")?;
    let target = rest
        .split_whitespace()
        .next()
        .context("a view without TO")?;
    let (_, query) = rest.split_once(" AS SELECT ").context("no AS SELECT")?;
    let events = format!(" FROM {database}.events ");
    let query = format!("SELECT {query} ");
    anyhow::ensure!(
        query.matches(&events).count() == 1,
        "the view {name} does not read {database}.events once: {query:.200}"
    );
    let query = query.replace(&events, &format!(" FROM {database}.{RENAMED} "));
    Ok(format!(
        "CREATE MATERIALIZED VIEW {database}.{name}_from_kafka TO {target} AS {} {}",
        row_aliases(),
        query.trim_end()
    ))
}

/// A fresh `database` of the consumer's schema, filled from `source` by the Kafka engine
/// from the moment this returns.
pub async fn create(
    clickhouse: &ClickHouse,
    database: &str,
    source: &Source<'_>,
) -> anyhow::Result<()> {
    clickhouse.recreate(database).await?;
    for statement in statements(database) {
        clickhouse.query(&statement).await?;
    }
    let views = clickhouse
        .query(&format!(
            "SELECT arrayJoin(dependencies_table) FROM system.tables \
             WHERE database = '{database}' AND name = 'events' FORMAT TSVRaw"
        ))
        .await?;
    for view in views.lines().filter(|v| !v.is_empty()) {
        let create = clickhouse
            .query(&format!(
                "SHOW CREATE TABLE {database}.{view} FORMAT TSVRaw"
            ))
            .await?;
        clickhouse
            .query(&view_from_kafka(create.trim(), database)?)
            .await?;
    }
    clickhouse
        .query(&format!("DROP TABLE {database}.{QUEUE}"))
        .await?;
    clickhouse.query(&kafka_table(database, source)).await?;
    Ok(())
}

/// Stops the engine of `database` for good. Dropping a Kafka table that is streaming
/// aborts the 18.16 server with a librdkafka 2.x (`rd_kafka_cgrp_destroy_final: assert:
/// !rkcg->rkcg_subscription`: 18.16 leaves its consumer subscribed), so the views go
/// first, and the table only once its stream has ended: at the latest after
/// `stream_flush_interval_ms` (7.5 s by default).
pub async fn stop(clickhouse: &ClickHouse, database: &str) -> anyhow::Result<()> {
    clickhouse
        .query(&format!("DROP TABLE {database}.{RENAMED}"))
        .await?;
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    clickhouse
        .query(&format!("DROP TABLE {database}.{QUEUE}"))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREATE: &str = "CREATE MATERIALIZED VIEW db.visitors_mv TO db.visitors ( public_key \
        LowCardinality(String),  phase UInt32) AS SELECT public_key, phase, \
        minIfState(event_time, event_name = 'impression') AS first FROM db.events  GROUP BY \
        public_key, phase";

    #[test]
    fn a_view_of_events_becomes_a_view_of_the_renamed_messages_with_the_same_query() {
        let view = view_from_kafka(CREATE, "db").unwrap();
        assert!(
            view.starts_with(
                "CREATE MATERIALIZED VIEW db.visitors_mv_from_kafka TO db.visitors AS WITH "
            ),
            "{view}"
        );
        assert!(
            view.ends_with(
                " SELECT public_key, phase, minIfState(event_time, event_name = 'impression') \
                 AS first FROM db.events_kafka  GROUP BY public_key, phase"
            ),
            "{view}"
        );
        assert!(view.contains("ifNull(event_time_raw, received_at_raw) AS event_time"));
    }

    #[test]
    fn a_view_that_does_not_read_events_once_is_refused() {
        let other = CREATE.replace("FROM db.events ", "FROM db.other ");
        assert!(view_from_kafka(&other, "db").is_err());
        let twice = CREATE.replace(
            "GROUP BY",
            "WHERE public_key IN (SELECT public_key FROM db.events ) GROUP BY",
        );
        assert!(view_from_kafka(&twice, "db").is_err());
        assert!(view_from_kafka(CREATE, "other").is_err());
    }

    #[test]
    fn every_column_of_a_row_has_an_alias_and_every_field_a_queue_column() {
        let aliases = row_aliases();
        for &(name, _) in EventRow::<String>::COLUMNS {
            assert!(
                aliases.contains(&format!(" AS {name},"))
                    || aliases.ends_with(&format!(" AS {name}")),
                "{name}"
            );
        }
        // Every `<field>_raw` the aliases read is a field the renaming view makes.
        let renamed = &statements("db")[1];
        for word in aliases.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if let Some(field) = word.strip_suffix("_raw") {
                assert!(renamed.contains(&format!(" {field} AS {word}")), "{word}");
            }
        }
        let queue: Vec<&str> = queue_columns().iter().map(|c| c.0).collect();
        assert!(!queue.contains(&"received_at_ms"));
        assert_eq!(queue.len(), EventRow::<String>::COLUMNS.len());
    }
}

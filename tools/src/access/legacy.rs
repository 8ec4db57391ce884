//! ClickHouse 18.x: an analyst reads a copy of the analysts' schema of their own,
//! filled by feeds (materialized views) with their keys' rows, and logs in by a
//! `users.d` file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clickhouse_kit::topology::{LOCAL_SUFFIX, Server, Topology};
use schema::ServerCaps;

use super::common::{ACCESS_DB, Caps, key_list, lets_in, run_all, sha256_hex};

/// 18.x: the analyst's own database, a copy of the analysts' schema.
pub(super) fn copy_of(user: &str) -> String {
    format!("{}{user}", crate::erase::COPY_PREFIX)
}

/// 18.x: the tables of the copy that a feed fills, the table of the analysts' database it
/// reads (as inserted) and which of its rows: `{keys}` is the granted keys' list. A sharded
/// table ([`SHARDED`]) is read on each server from its own shard's part. A table that a materialized view of
/// the analysts' database fills is fed from that view's source, since 18.x runs no
/// materialized view on another's writes.
pub(super) const FED: &[(&str, &str, &str)] = &[
    ("events", "events", "public_key IN ({keys})"),
    // The experiments of the analyst's keys, their variants and their metrics. A row that
    // lists no key (written before the keys were recorded, or of an experiment no key
    // serves: a draft) goes to nobody: anyone can send events of any experiment id with
    // their own key, so having its events proves nothing.
    (
        "experiment_variants",
        "experiment_variants",
        "hasAny(public_keys, [{keys}])",
    ),
    (
        "experiment_metrics",
        "experiment_metrics",
        "hasAny(public_keys, [{keys}])",
    ),
    // The metric values stored by the consumers' refresh, from each shard's own part.
    (
        "visitor_metric_values",
        "visitor_metric_values",
        "public_key IN ({keys})",
    ),
    // The operators' tuning of the statistics, and its history: no site's data.
    ("results_settings", "results_settings", "1"),
    ("results_settings_log", "results_settings", "1"),
    // How far the consumers' refreshes got (`as_of`): no site's data.
    ("metric_refresh_marks", "metric_refresh_marks", "1"),
];

/// 18.x: the fed tables that a cluster shards: written in each shard's own part.
pub(super) const SHARDED: &[&str] = &["events", "visitor_metric_values"];

/// 18.x: a feed, the materialized view in `analytics_access` named `USER__TABLE` that
/// copies rows into the analyst's copy as they are inserted.
pub(super) fn feed_name(user: &str, table: &str) -> String {
    format!("{ACCESS_DB}.{user}__{table}")
}

/// 18.x: what makes the feeds on one server. `columns` gives each fed table's columns as
/// the copy has them (a materialized view of 18.x fills its target by position). The
/// aggregate `experiment_visitors` gets a feed of its own: 18.x does not run the copy's
/// materialized views for rows that a feed writes; nor does `visitor_event_counts`.
pub(super) fn legacy_feeds(
    caps: ServerCaps,
    cluster: Option<&str>,
    database: &str,
    user: &str,
    keys: &[String],
    columns: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let copy = copy_of(user);
    let local = if cluster.is_some() { LOCAL_SUFFIX } else { "" };
    let keys = key_list(keys);
    let mut sql: Vec<String> = FED
        .iter()
        .map(|(table, source, filter)| {
            let from = if SHARDED.contains(source) {
                format!("{source}{local}")
            } else {
                (*source).to_owned()
            };
            let select = own_keys_only(&columns(table), &keys);
            format!(
                "CREATE MATERIALIZED VIEW {} TO {copy}.{table} AS SELECT {select} \
                 FROM {database}.{from} WHERE {}",
                feed_name(user, table),
                filter.replace("{keys}", &keys)
            )
        })
        .collect();
    sql.push(format!(
        "CREATE MATERIALIZED VIEW {} TO {copy}.experiment_visitors AS {}",
        feed_name(user, "experiment_visitors"),
        schema::visitors_select(caps, cluster, database, &format!("public_key IN ({keys})"))
    ));
    sql.push(format!(
        "CREATE MATERIALIZED VIEW {} TO {copy}.visitor_event_counts AS {}",
        feed_name(user, "visitor_event_counts"),
        schema::event_counts_select(caps, cluster, database, &format!("public_key IN ({keys})"))
    ));
    sql
}

/// 18.x: the select list of a feed or a backfill for the columns `cols`: a definition's
/// `public_keys` keeps only the analyst's `keys`, so that a copy does not tell which other
/// sites serve a shared experiment. (The feeds' filters read the same alias: keeping a
/// granted key keeps the row.)
pub(super) fn own_keys_only(cols: &str, keys: &str) -> String {
    cols.split(", ")
        .map(|column| {
            if column == "public_keys" {
                format!("arrayFilter(k -> has([{keys}], k), public_keys) AS public_keys")
            } else {
                column.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// 18.x: what fills the copy with the rows stored before its feeds, once (a cluster
/// replicates the copy to every server). The copy's own materialized view builds its
/// `experiment_visitors` from the events inserted. A row inserted between the feeds and
/// this is copied twice, which the copy's tables absorb as the analysts' database absorbs
/// a redelivery (`FINAL`, aggregates).
pub(super) fn legacy_backfill(
    database: &str,
    user: &str,
    keys: &[String],
    columns: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let copy = copy_of(user);
    let keys = key_list(keys);
    FED.iter()
        .map(|(table, _, filter)| {
            let filter = filter.replace("{keys}", &keys);
            let cols = columns(table);
            let select = own_keys_only(&cols, &keys);
            format!(
                "INSERT INTO {copy}.{table} ({cols}) SELECT {select} FROM {database}.{table} \
                 WHERE {filter}"
            )
        })
        .collect()
}

/// 18.x: the analyst's users.d file: the user, who may read their copy only, their
/// profile (read-only, capped) and their hourly quota, all named after them.
pub(super) fn legacy_user_file(
    user: &str,
    password: &str,
    networks: &[String],
    caps: &Caps,
) -> String {
    let networks: String = networks.iter().map(|n| format!("<ip>{n}</ip>")).collect();
    let settings: String = caps
        .settings()
        .iter()
        .map(|(name, value)| format!("<{name}>{value}</{name}>"))
        .collect();
    format!(
        "<?xml version=\"1.0\"?>\n<!-- analytics-access grant: do not edit -->\n<yandex>\n\
         <profiles><analyst_{user}>{settings}</analyst_{user}></profiles>\n\
         <quotas><analyst_{user}><interval><duration>3600</duration>\
         <queries>{}</queries><errors>0</errors><result_rows>0</result_rows>\
         <read_rows>0</read_rows><execution_time>{}</execution_time>\
         </interval></analyst_{user}></quotas>\n\
         <users><{user}>\n  <password_sha256_hex>{}</password_sha256_hex>\n  \
         <networks>{networks}</networks>\n  \
         <profile>analyst_{user}</profile><quota>analyst_{user}</quota>\n  \
         <allow_databases><database>{}</database></allow_databases>\n\
         </{user}></users></yandex>\n",
        caps.queries_per_hour,
        caps.execution_secs_per_hour,
        sha256_hex(password),
        copy_of(user),
    )
}

pub(super) fn user_file(dir: &Path, user: &str) -> PathBuf {
    dir.join(format!("analyst-{user}.xml"))
}

/// Writes `contents` to `path` whole or not at all, readable by the server only.
pub(super) fn write_atomically(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension("xml.new");
    let dir = path.parent().unwrap_or(Path::new("."));
    if !dir.exists() {
        // A server's first analyst: its users.d, owned as the server's folder is.
        std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
        let server = std::fs::metadata(dir.parent().unwrap_or(Path::new(".")))?;
        std::os::unix::fs::chown(
            dir,
            Some(std::os::unix::fs::MetadataExt::uid(&server)),
            Some(std::os::unix::fs::MetadataExt::gid(&server)),
        )
        .ok();
    }
    std::fs::write(&tmp, contents).with_context(|| format!("cannot write {}", tmp.display()))?;
    // The server (its own user) must read it: give it the folder's owner.
    let folder = std::fs::metadata(dir)?;
    std::os::unix::fs::chown(
        &tmp,
        Some(std::os::unix::fs::MetadataExt::uid(&folder)),
        Some(std::os::unix::fs::MetadataExt::gid(&folder)),
    )
    .ok();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o640))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// The columns of `database.table` that an insert writes (not `MATERIALIZED` or `ALIAS`),
/// in the table's order, as a list for SQL.
pub(super) async fn insert_columns(
    server: &Server,
    database: &str,
    table: &str,
) -> anyhow::Result<String> {
    let names: Vec<String> = server
        .client
        .query(
            "SELECT name FROM system.columns WHERE database = ? AND table = ? \
             AND default_kind NOT IN ('MATERIALIZED', 'ALIAS')",
        )
        .bind(database)
        .bind(table)
        .fetch_all()
        .await
        .with_context(|| format!("cannot read the columns of {database}.{table}"))?;
    anyhow::ensure!(
        !names.is_empty(),
        "{}: no table {database}.{table}",
        server.url
    );
    Ok(names.join(", "))
}

/// The analyst a feed (`USER__TABLE`) is of. A table's name holds no `__`, so the name
/// splits at its last: `x___events` is `x_`'s, never `x`'s, though it starts with `x__`.
pub(super) fn feed_owner(feed: &str) -> Option<&str> {
    feed.rsplit_once("__").map(|(user, _)| user)
}

/// 18.x: the analyst's feeds and copy gone from every server (and, from before the copies,
/// the filtering views of the same names).
pub(super) async fn legacy_drop(topology: &Topology, user: &str) -> anyhow::Result<()> {
    for server in topology.servers() {
        let feeds: Vec<String> = server
            .client
            .query("SELECT name FROM system.tables WHERE database = ? AND startsWith(name, ?)")
            .bind(ACCESS_DB)
            .bind(format!("{user}__"))
            .fetch_all()
            .await?;
        let mut sql: Vec<String> = feeds
            .iter()
            .filter(|feed| feed_owner(feed) == Some(user))
            .map(|feed| format!("DROP TABLE IF EXISTS {ACCESS_DB}.{feed}"))
            .collect();
        sql.push(format!("DROP DATABASE IF EXISTS {}", copy_of(user)));
        run_all(server, &sql).await?;
    }
    Ok(())
}

/// 18.x: the analyst's copy made anew, its feeds on every server, the rows already stored
/// copied in.
pub(super) async fn legacy_grant(
    topology: &Topology,
    caps: ServerCaps,
    database: &str,
    user: &str,
    keys: &[String],
) -> anyhow::Result<()> {
    let copy = copy_of(user);
    legacy_drop(topology, user).await?;
    schema::migrate_copy(topology, &copy)
        .await
        .with_context(|| format!("cannot make the copy {copy}"))?;
    let primary = topology.servers().next().context("no server")?;
    let mut columns = Vec::new();
    for (table, _, _) in FED {
        columns.push((*table, insert_columns(primary, &copy, table).await?));
    }
    let columns_of = |table: &str| {
        columns
            .iter()
            .find(|(t, _)| *t == table)
            .map(|(_, c)| c.clone())
            .unwrap_or_default()
    };
    for server in topology.servers() {
        let feeds = legacy_feeds(
            caps,
            topology.cluster.as_deref(),
            database,
            user,
            keys,
            &columns_of,
        );
        run_all(server, &feeds).await?;
    }
    run_all(primary, &legacy_backfill(database, user, keys, &columns_of)).await
}

/// 18.x: waits until the server no longer knows `user` (its users.d file read again).
pub(super) async fn wait_gone(
    server: &Server,
    user: &str,
    deadline: Instant,
) -> anyhow::Result<()> {
    loop {
        let answer = lets_in(server, user, "", "system.one").await;
        if answer.as_ref().is_err_and(|e| e.contains("Unknown user")) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{}: the server still knows {user} after the wait (does it read the users \
             folder?): {answer:?}",
            server.url
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feed_is_of_the_user_before_its_last_separator() {
        assert_eq!(feed_owner("x__events"), Some("x"));
        assert_eq!(feed_owner("x___events"), Some("x_"));
        assert_eq!(feed_owner("x_y__experiment_visitors"), Some("x_y"));
        assert_eq!(feed_owner("events"), None);
    }
}

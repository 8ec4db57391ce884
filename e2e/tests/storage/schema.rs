//! The analysts' schema on the real ClickHouse of the tests.

use e2e::unique;

#[tokio::test]
async fn migrations_create_the_schema_once_and_rerun_as_a_no_op() {
    let database = unique("test_");
    let client = e2e::clickhouse(&database);
    schema::migrate(&client, &database)
        .await
        .expect("first run");
    schema::migrate(&client, &database)
        .await
        .expect("second run");

    let versions: Vec<u32> = client
        .query("SELECT version FROM schema_migrations ORDER BY version")
        .fetch_all()
        .await
        .expect("migrations recorded");
    assert_eq!(
        versions,
        schema::migration_versions(),
        "each migration recorded once"
    );

    // The hour of the over-time views is a UTC time on every server (18.x lost the zone
    // through an array).
    for table in [
        "experiment_results_over_time",
        "experiment_variant_counts_over_time",
    ] {
        let hour: String = client
            .query("SELECT type FROM system.columns WHERE database = ? AND table = ? AND name = 'hour'")
            .bind(&database)
            .bind(table)
            .fetch_one()
            .await
            .expect("hour");
        assert_eq!(hour, "DateTime('UTC')", "{table}");
    }

    let columns: Vec<String> = client
        .query(
            "SELECT name FROM system.columns WHERE database = ? AND table = 'events' ORDER BY name",
        )
        .bind(&database)
        .fetch_all()
        .await
        .expect("columns");
    for fixed in [
        "event_id",
        "public_key",
        "received_at",
        "event_name",
        "experiment_id",
        "session_id",
        "variant_id",
        "conversion",
        "load_time",
        "scroll_depth",
        "time_on_page",
        "click_target",
        "pathname",
        "referrer",
        "utm_source",
        "utm_medium",
        "utm_campaign",
        "utm_term",
        "utm_content",
        "test",
    ] {
        assert!(
            columns.iter().any(|c| c == fixed),
            "column {fixed} missing from {columns:?}"
        );
    }
    e2e::drop_database(&database).await;
}

/// Every column of the row is in `events` with its type, and `events` has no other: the
/// list of an event's fields and the migrations agree.
/// Two consumers start together and one falls behind: it read `schema_migrations` when
/// six migrations were recorded, and applies the seventh only after the other has applied
/// them all. It must skip what the other recorded, not run migration 7's backfill into the
/// table migration 11 widened, nor make again the view migration 11 dropped.
#[tokio::test]
async fn a_consumer_behind_another_skips_what_the_other_applied_meanwhile() {
    let database = unique("test_");
    let client = e2e::clickhouse(&database);
    schema::migrate(&client, &database)
        .await
        .expect("the one ahead");
    let views = |client: clickhouse::Client, database: String| async move {
        client
            .query("SELECT name FROM system.tables WHERE database = ? ORDER BY name")
            .bind(database)
            .fetch_all::<String>()
            .await
            .expect("tables")
    };
    let before = views(client.clone(), database.clone()).await;
    schema::migrate_as_read_when(&client, &database, &[1, 2, 3, 4, 5, 6])
        .await
        .expect("the one behind");
    assert_eq!(
        views(client.clone(), database.clone()).await,
        before,
        "the one behind made or dropped nothing"
    );
    let records: u64 = client
        .query("SELECT count() FROM schema_migrations")
        .fetch_one()
        .await
        .expect("records");
    assert_eq!(
        records,
        schema::migration_versions().len() as u64,
        "each migration recorded once"
    );
}

#[tokio::test]
async fn the_events_table_has_the_rows_columns_and_no_other() {
    let (database, client) = migrated().await;
    let caps = schema::ServerCaps::of(&client)
        .await
        .expect("server version");
    let mut want: Vec<(String, String)> = schema::event_columns(caps)
        .into_iter()
        .map(|(name, ty)| (name.to_owned(), ty))
        .collect();
    let mut got: Vec<(String, String)> = client
        .query("SELECT name, type FROM system.columns WHERE database = ? AND table = 'events'")
        .bind(&database)
        .fetch_all()
        .await
        .expect("columns");
    // The row names its columns when it writes, so their order in the table is free.
    want.sort();
    got.sort();
    assert_eq!(got, want);
    // A column of each of the client's fields, of the list's type.
    for field in contract::event::FIELDS {
        let column = (field.name.to_owned(), field.column.to_owned());
        assert!(got.contains(&column), "{column:?} in {got:?}");
    }
    e2e::drop_database(&database).await;
}

/// Each results view has the columns of its row type (`schema::view_rows`), in its order
/// and of its types, so that the readers' `SELECT ?fields` takes every column.
/// (The same on a modern server: `modern_clickhouse.rs`.)
#[tokio::test]
async fn each_results_view_has_the_columns_of_its_row_type() {
    let (database, client) = migrated().await;
    for (view, columns) in schema::view_rows::VIEWS {
        let got: Vec<(String, String)> = client
            .query("SELECT name, type FROM system.columns WHERE database = ? AND table = ?")
            .bind(&database)
            .bind(view)
            .fetch_all()
            .await
            .expect("columns");
        let want: Vec<(String, String)> = columns
            .iter()
            .map(|(name, ty)| (name.to_string(), ty.to_string()))
            .collect();
        assert_eq!(got, want, "{view}");
    }
    e2e::drop_database(&database).await;
}

#[tokio::test]
async fn an_upgrade_keeps_the_rows_and_counts_them_in_the_results() {
    let database = unique("test_");
    let client = e2e::clickhouse(&database);
    // The schema of the release before event times and results, with its rows.
    schema::migrate_up_to(&client, &database, 2)
        .await
        .expect("old schema");
    client
        .query(
            "INSERT INTO events (event_id, received_at, public_key, event_name, experiment_id, \
             variant_id, session_id, test) VALUES \
             (toUUID('00000000-0000-0000-0000-000000000001'), toDateTime(1763700000), 'pk_x', 'impression', 'exp_1', 'var_a', 's1', 0), \
             (toUUID('00000000-0000-0000-0000-000000000002'), toDateTime(1763700001), 'pk_x', 'conversion', 'exp_1', '', 's1', 0)",
        )
        .execute()
        .await
        .expect("old rows");
    schema::migrate(&client, &database).await.expect("upgrade");

    let times: Vec<(i64, i64)> = client
        .query("SELECT received_at_ms, event_time FROM events ORDER BY received_at")
        .fetch_all()
        .await
        .expect("times");
    assert_eq!(
        times,
        [
            (1_763_700_000_000, 1_763_700_000_000),
            (1_763_700_001_000, 1_763_700_001_000)
        ]
    );
    let counts: Vec<(String, u64, u64)> = client
        .query("SELECT variant_id, exposed, converted FROM experiment_results")
        .fetch_all()
        .await
        .expect("results");
    assert_eq!(counts, [("var_a".to_owned(), 1, 1)]);
    e2e::drop_database(&database).await;
}

/// A fresh database with the schema applied.
async fn migrated() -> (String, clickhouse::Client) {
    let database = unique("test_");
    let client = e2e::clickhouse(&database);
    schema::migrate(&client, &database).await.expect("migrates");
    (database, client)
}

/// The row the consumer stores for a client event received at a fixed time.
fn row(event: serde_json::Value) -> schema::EventRow {
    let envelope =
        contract::event::Envelope::new(1_763_700_000_000, "pk_x".into(), String::new(), None);
    schema::EventRow::from(
        contract::event::EventMessage::from_client(&event, &envelope).expect("valid"),
    )
}

#[tokio::test]
async fn a_redelivered_event_counts_once_with_final() {
    let (database, client) = migrated().await;
    // No background merge: the two copies stay in two parts, so the raw count sees both
    // and only FINAL collapses them (a merge could collapse them before the count).
    client
        .query(&format!("SYSTEM STOP MERGES {database}.events"))
        .execute()
        .await
        .expect("merges stopped");
    let row = row(serde_json::json!({
        "eventName": "impression", "experimentId": "exp_1", "sessionId": "s"
    }));
    for _ in 0..2 {
        let mut insert = client
            .insert::<schema::EventRow>("events")
            .await
            .expect("insert starts");
        insert.write(&row).await.expect("row written");
        insert.end().await.expect("insert ends");
    }
    let raw: u64 = client
        .query("SELECT count() FROM events")
        .fetch_one()
        .await
        .expect("count");
    let fin: u64 = client
        .query("SELECT count() FROM events FINAL")
        .fetch_one()
        .await
        .expect("count");
    assert_eq!((raw, fin), (2, 1));
    e2e::drop_database(&database).await;
}

#[tokio::test]
async fn experiment_daily_counts_each_event_once_without_test_traffic() {
    let (database, client) = migrated().await;
    let base = |name: &str, session: &str| {
        serde_json::json!({ "eventName": name, "experimentId": "exp_1", "sessionId": session,
                            "variantId": "var_a" })
    };
    let impression = row(base("impression", "s1"));
    let mut with_conversion = base("click", "s2");
    with_conversion["conversion"] = serde_json::json!(true);
    let mut test_event = base("impression", "s3");
    test_event["test"] = serde_json::json!(true);
    let rows = [
        impression.clone(),
        impression, // delivered twice
        row(base("impression", "s2")),
        row(with_conversion),
        row(base("conversion", "s1")),
        row(test_event),
    ];
    let mut insert = client
        .insert::<schema::EventRow>("events")
        .await
        .expect("insert");
    for r in &rows {
        insert.write(r).await.expect("row");
    }
    insert.end().await.expect("insert ends");

    let got: Vec<(String, String, u64, u64, u64, u64)> = client
        .query(
            "SELECT experiment_id, variant_id, impressions, conversions, sessions, events \
             FROM experiment_daily",
        )
        .fetch_all()
        .await
        .expect("view answers");
    assert_eq!(got, [("exp_1".to_owned(), "var_a".to_owned(), 2, 2, 2, 4)]);
    e2e::drop_database(&database).await;
}

/// Every view answers for each of its columns alone after ClickHouse restarts. A restart
/// attaches each view again from its stored text, with its columns listed; 18.x then
/// drops a column the query does not ask for even when another column of the same SELECT
/// is computed from it, so a view can answer `SELECT *` when created and fail after the
/// next restart.
#[tokio::test]
async fn every_view_answers_each_column_after_a_restart() {
    let mut server = e2e::PrivateClickHouse::start().await;
    let database = unique("test_");
    let client = e2e::clickhouse_at(&server.url(), &database);
    schema::migrate(&client, &database).await.expect("migrates");
    server.stop();
    server.start_again().await;

    let columns: Vec<(String, String)> = client
        .query(
            "SELECT table, name FROM system.columns WHERE database = ? AND table IN \
             (SELECT name FROM system.tables WHERE database = ? AND engine = 'View') \
             ORDER BY table, name",
        )
        .bind(&database)
        .bind(&database)
        .fetch_all()
        .await
        .expect("the views' columns");
    assert!(columns.len() > 100, "every view listed: {}", columns.len());
    use futures::StreamExt as _;
    let failures: Vec<String> = futures::stream::iter(&columns)
        .map(|(view, column)| {
            let client = client.clone();
            async move {
                let select = format!("SELECT `{column}` FROM `{view}` FORMAT Null");
                let answer = client.query(&select).execute().await;
                answer.err().map(|e| format!("{view}.{column}: {e}"))
            }
        })
        .buffer_unordered(4)
        .filter_map(std::future::ready)
        .collect()
        .await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Consumers that start together migrate one at a time and end with the whole schema; a
/// lock left by a migrator that died is broken once it stops beating, and a live one is
/// waited for.
#[tokio::test]
async fn migrators_take_turns_and_a_dead_ones_lock_is_broken() {
    let tables = |database: String| async move {
        e2e::clickhouse("default")
            .query("SELECT name, engine FROM system.tables WHERE database = ? ORDER BY name")
            .bind(database)
            .fetch_all::<(String, String)>()
            .await
            .expect("tables")
    };
    let (reference, _) = migrated().await;
    let want = tables(reference.clone()).await;

    let together = unique("test_");
    let client = e2e::clickhouse(&together);
    let (a, b, c) = tokio::join!(
        schema::migrate(&client, &together),
        schema::migrate(&client, &together),
        schema::migrate(&client, &together),
    );
    for migrated in [a, b, c] {
        migrated.expect("each migrates");
    }
    assert_eq!(
        tables(together.clone()).await,
        want,
        "the whole schema, once"
    );

    // A lock whose last beat is ten minutes old: its migrator died.
    let dead = unique("test_");
    held_lock(&dead, Some("now() - 600")).await;
    migrate_within_a_minute(&dead)
        .await
        .expect("the dead lock broken at once");
    assert_eq!(
        tables(dead.clone()).await,
        want,
        "the lock broken and dropped"
    );

    // A live lock, beating for three seconds and then dropped: waited for.
    let live = unique("test_");
    held_lock(&live, None).await;
    let holder = {
        let (root, live) = (e2e::clickhouse("default"), live.clone());
        tokio::spawn(async move {
            for _ in 0..6 {
                let beat = format!("INSERT INTO {live}.schema_migrations_lock SELECT now()");
                root.query(&beat).execute().await.expect("beat");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            let drop = format!("DROP TABLE {live}.schema_migrations_lock");
            root.query(&drop).execute().await.expect("released");
        })
    };
    let started = std::time::Instant::now();
    migrate_within_a_minute(&live)
        .await
        .expect("migrates once the lock is released");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(2900),
        "waited for the holder: {:?}",
        started.elapsed()
    );
    holder.await.expect("holder");
    assert_eq!(tables(live.clone()).await, want);
    for database in [reference, together, dead, live] {
        e2e::drop_database(&database).await;
    }
}

/// `database` with the migration lock of another migrator, its one beat at `beat` (an SQL
/// time) if any.
async fn held_lock(database: &str, beat: Option<&str>) {
    let root = e2e::clickhouse("default");
    let mut statements = vec![
        format!("CREATE DATABASE {database}"),
        format!("CREATE TABLE {database}.schema_migrations_lock (beat DateTime) ENGINE = Log"),
    ];
    if let Some(beat) = beat {
        statements.push(format!(
            "INSERT INTO {database}.schema_migrations_lock SELECT {beat}"
        ));
    }
    for sql in statements {
        root.query(&sql)
            .execute()
            .await
            .expect("another migrator's lock");
    }
}

/// Migrates `database`; `Err` when it takes more than a minute.
async fn migrate_within_a_minute(database: &str) -> Result<(), tokio::time::error::Elapsed> {
    let client = e2e::clickhouse(database);
    let migrated = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        schema::migrate(&client, database),
    )
    .await?;
    migrated.expect("migrates");
    Ok(())
}

/// The statements of a rendered schema file (`schema/rendered/`, or a fixture of an older
/// one) for `database`, each with the settings its header names.
fn rendered_statements(file: &str, database: &str) -> Vec<(String, bool)> {
    // A statement starts at its header, `-- N. runs ...`, and ends before the next one.
    let is_header = |line: &str| {
        line.strip_prefix("-- ")
            .and_then(|rest| rest.split_once(". runs "))
            .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
    };
    let mut statements: Vec<(String, bool)> = Vec::new();
    for line in file.lines() {
        if is_header(line) {
            statements.push((String::new(), line.contains("low_cardinality")));
        } else if let Some((sql, _)) = statements.last_mut() {
            sql.push_str(line);
            sql.push('\n');
        }
    }
    statements
        .into_iter()
        .map(|(sql, low_cardinality)| {
            let sql = sql.trim_end().trim_end_matches(';');
            (
                sql.replace("analytics.", &format!("{database}."))
                    .replace("EXISTS analytics", &format!("EXISTS {database}")),
                low_cardinality,
            )
        })
        .collect()
}

/// A database as main of 2026-11-28 migrated it (views made by migrations 2 to 16) moves
/// to views kept as current definitions: each made again once, recorded, answering as
/// before.
#[tokio::test]
async fn a_database_migrated_by_the_numbered_views_upgrades_in_place() {
    let database = unique("test_");
    let server = e2e::clickhouse("default");
    let old = include_str!("../fixtures/schema-2026-11-28-18-single.sql");
    for (sql, low_cardinality) in rendered_statements(old, &database) {
        let mut query = server.query(&sql);
        if low_cardinality {
            query = query.with_setting("allow_experimental_low_cardinality_type", "1");
        }
        query.execute().await.expect("the old schema's statement");
    }
    let client = e2e::clickhouse(&database);
    client
        .query("INSERT INTO schema_migrations SELECT number + 1, 'old', now() FROM numbers(16)")
        .execute()
        .await
        .expect("old records");
    client
        .query(
            "INSERT INTO events (event_id, received_at, public_key, event_name, experiment_id, \
             variant_id, session_id, visitor_id) SELECT generateUUIDv4(), \
             toDateTime(1763700000 + number), 'pk_x', \
             if(number % 3 = 2 AND intDiv(number, 3) % 4 = 0, 'conversion', 'impression'), \
             'exp_1', if(number % 3 = 2 AND intDiv(number, 3) % 4 = 0, '', \
             if(intDiv(number, 3) % 2 = 0, 'a', 'b')), \
             concat('s', toString(intDiv(number, 3))), concat('v', toString(intDiv(number, 3))) \
             FROM numbers(600)",
        )
        .execute()
        .await
        .expect("rows");
    let results = || async {
        client
            .query(
                "SELECT variant_id, exposed, converted, ifNull(p_value, -1) \
                 FROM experiment_results ORDER BY variant_id",
            )
            .fetch_all::<(String, u64, u64, f64)>()
            .await
            .expect("results")
    };
    let before = results().await;
    assert_eq!(before.len(), 2, "{before:?}");

    schema::migrate(&client, &database).await.expect("upgrade");
    assert_eq!(
        results().await,
        before,
        "the same results after the upgrade"
    );
    let made: Vec<String> = client
        .query("SELECT name FROM schema_views ORDER BY name")
        .fetch_all()
        .await
        .expect("records");
    let mut views = schema::view_names();
    views.sort_unstable();
    assert_eq!(made, views, "each view made again once");
    // No metric is defined here (the consumer writes them): the view answers, empty.
    let metrics: u64 = client
        .query("SELECT count() FROM experiment_metric_results")
        .fetch_one()
        .await
        .expect("the metric view answers");
    assert_eq!(metrics, 0);
    // Nothing left to do: a second run makes nothing again.
    schema::migrate(&client, &database).await.expect("again");
    let records: u64 = client
        .query("SELECT count() FROM schema_views")
        .fetch_one()
        .await
        .expect("records");
    assert_eq!(records, 15);
    e2e::drop_database(&database).await;
}

/// A database of migration 18 keeps its stored metric values through migration 19, with
/// no sweep: a row per visitor, experiment and phase, at their latest refresh, the metrics
/// in arrays; the table of a row per metric is gone. After migration 21 a stored row reads
/// a history where its covariate is not 0.
#[tokio::test]
async fn stored_metric_values_become_one_row_per_visitor_at_the_upgrade() {
    let database = unique("test_");
    let client = e2e::clickhouse(&database);
    schema::migrate_up_to(&client, &database, 18)
        .await
        .expect("18");
    client
        .query(
            "INSERT INTO experiment_metric_values (public_key, experiment_id, phase, \
             visitor_id, metric_id, variant_id, first_exposure_ms, value, denominator, \
             pre_value, events_seen, settings_hash, refresh_id) VALUES \
             ('pk_x', 'exp_1', 1, 'v1', 'clicks', 'a', 1000, 1, 1, 0, 3, 7, 10), \
             ('pk_x', 'exp_1', 1, 'v1', 'dropped', 'a', 1000, 9, 1, 0, 3, 7, 10), \
             ('pk_x', 'exp_1', 1, 'v1', 'clicks', 'b', 2000, 5, 1, 2, 4, 8, 20), \
             ('pk_x', 'exp_1', 1, 'v1', 'revenue', 'b', 2000, 7, 2, 0, 4, 8, 20), \
             ('pk_x', 'exp_2', 1, 'v1', 'clicks', 'a', 1500, 3, 1, 0, 4, 9, 20), \
             ('pk_x', 'exp_1', 1, 'v2', '', '', 0, 0, 0, 0, 2, 8, 30)",
        )
        .execute()
        .await
        .expect("stored values of 18");
    schema::migrate(&client, &database).await.expect("19");

    #[derive(clickhouse::Row, serde::Deserialize, Debug, PartialEq)]
    struct Stored {
        experiment_id: String,
        visitor_id: String,
        variant_id: String,
        first_exposure_ms: i64,
        metrics: Vec<(String, f64, f64, f64, f64)>,
        events_seen: u64,
        settings_hash: u64,
        refresh_id: u64,
    }
    let mut rows: Vec<Stored> = client
        .query(
            "SELECT experiment_id, visitor_id, variant_id, first_exposure_ms, \
             arrayMap((m, v, d, p, h) -> (m, v, d, p, h), metrics.metric_id, metrics.value, \
             metrics.denominator, metrics.pre_value, metrics.pre_seen) AS metrics, events_seen, \
             settings_hash, \
             refresh_id FROM visitor_metric_values ORDER BY experiment_id, visitor_id",
        )
        .fetch_all()
        .await
        .expect("rows");
    for row in &mut rows {
        row.metrics.sort_by(|a, b| a.0.cmp(&b.0));
    }
    let stored =
        |experiment: &str, visitor: &str, variant: &str, first: i64, metrics, seen| Stored {
            experiment_id: experiment.into(),
            visitor_id: visitor.into(),
            variant_id: variant.into(),
            first_exposure_ms: first,
            metrics,
            events_seen: seen,
            settings_hash: if experiment == "exp_2" { 9 } else { 8 },
            refresh_id: if visitor == "v2" { 30 } else { 20 },
        };
    let metric = |id: &str, v: f64, d: f64, p: f64| (id.to_owned(), v, d, p, f64::from(p != 0.));
    assert_eq!(
        rows,
        [
            stored(
                "exp_1",
                "v1",
                "b",
                2000,
                vec![metric("clicks", 5., 1., 2.), metric("revenue", 7., 2., 0.)],
                4
            ),
            stored("exp_1", "v2", "", 0, vec![], 2),
            stored(
                "exp_2",
                "v1",
                "a",
                1500,
                vec![metric("clicks", 3., 1., 0.)],
                4
            ),
        ],
        "each visitor at their latest refresh"
    );
    let old: u64 = client
        .query("SELECT count() FROM system.tables WHERE database = ? AND name = ?")
        .bind(&database)
        .bind("experiment_metric_values")
        .fetch_one()
        .await
        .expect("tables");
    assert_eq!(old, 0, "the table of a row per metric is dropped");
    e2e::drop_database(&database).await;
}

/// A view whose text is not the current one (an older release's, or changed by hand with
/// its record) is made again at the next migration; a recorded view no longer defined is
/// dropped; the others are left alone.
#[tokio::test]
async fn a_changed_view_is_made_again_and_a_retired_one_dropped() {
    let (database, client) = migrated().await;
    let created = |name: &'static str| {
        let client = client.clone();
        let database = database.clone();
        async move {
            client
                .query("SELECT metadata_modification_time FROM system.tables WHERE database = ? AND name = ?")
                .bind(&database)
                .bind(name)
                .fetch_all::<u32>()
                .await
                .expect("tables")
        }
    };
    for sql in [
        "DROP TABLE experiment_daily",
        "CREATE VIEW experiment_daily AS SELECT 1 AS stale",
        "INSERT INTO schema_views SELECT 'experiment_daily', 'an older text', max(made_at) + 1 \
         FROM schema_views",
        "CREATE VIEW experiment_retired AS SELECT 1 AS x",
        "INSERT INTO schema_views VALUES ('experiment_retired', 'any', 1)",
    ] {
        client.query(sql).execute().await.expect(sql);
    }
    let untouched = created("experiment_results").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    schema::migrate(&client, &database).await.expect("migrates");

    let columns = daily_columns(&client, &database).await;
    assert!(
        columns.len() > 1 && !columns.contains(&"stale".to_owned()),
        "made again: {columns:?}"
    );
    assert!(created("experiment_retired").await.is_empty(), "dropped");
    assert_eq!(created("experiment_results").await, untouched, "left alone");
    e2e::drop_database(&database).await;
}

/// Every results view says, on each row, the time up to which the events it counts were
/// stored: a UTC time, the query's own while the views read every stored row.
#[tokio::test]
async fn every_results_row_says_as_of_when_in_utc() {
    let (database, client) = migrated().await;
    client
        .query(
            "INSERT INTO events (event_id, received_at, public_key, event_name, experiment_id, \
             variant_id, session_id, visitor_id) \
             SELECT generateUUIDv4(), now(), 'pk_x', 'impression', 'exp_1', 'a', 's1', 'v1'",
        )
        .execute()
        .await
        .expect("a row");
    for view in [
        "experiment_results",
        "experiment_results_over_time",
        "experiment_metric_results",
    ] {
        let ty: String = client
            .query("SELECT type FROM system.columns WHERE database = ? AND table = ? AND name = 'as_of'")
            .bind(&database)
            .bind(view)
            .fetch_one()
            .await
            .unwrap_or_else(|e| panic!("{view} has no as_of: {e}"));
        assert_eq!(ty, "DateTime('UTC')", "{view}");
    }
    let (lag, rows): (i64, u64) = client
        .query("SELECT max(toInt64(now()) - toInt64(as_of)), count() FROM experiment_results")
        .fetch_one()
        .await
        .expect("as_of");
    assert_eq!(rows, 1);
    // 18.x evaluates now() per SELECT, the view's after the outer one's: a query that
    // crosses a second reads its as_of a second after its own now().
    assert!((-1..=5).contains(&lag), "as_of {lag} s before the query");
    e2e::drop_database(&database).await;
}

/// During a rolling update the old consumers start beside the new: one that finds a
/// migration it does not know leaves the views as the newer binary made them.
#[tokio::test]
async fn an_older_consumer_leaves_a_newer_ones_views_alone() {
    let (database, client) = migrated().await;
    let newer = schema::migration_versions()
        .last()
        .copied()
        .expect("migrations")
        + 1;
    for sql in [
        format!("INSERT INTO schema_migrations VALUES ({newer}, 'a newer release', now())"),
        "DROP TABLE experiment_daily".to_owned(),
        "CREATE VIEW experiment_daily AS SELECT 1 AS newer".to_owned(),
        "INSERT INTO schema_views SELECT 'experiment_daily', 'a newer text', max(made_at) + 1 \
         FROM schema_views"
            .to_owned(),
    ] {
        client.query(&sql).execute().await.expect(&sql);
    }
    schema::migrate(&client, &database).await.expect("migrates");
    let columns = daily_columns(&client, &database).await;
    assert_eq!(columns, ["newer"], "the newer view kept");
    e2e::drop_database(&database).await;
}

/// The columns of `experiment_daily` in `database`, in their order.
async fn daily_columns(client: &clickhouse::Client, database: &str) -> Vec<String> {
    client
        .query("SELECT name FROM system.columns WHERE database = ? AND table = 'experiment_daily'")
        .bind(database)
        .fetch_all()
        .await
        .expect("columns")
}

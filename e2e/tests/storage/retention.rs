//! Retention against a real ClickHouse, one server and the cluster of `cluster.rs`
//! (`TEST_CLICKHOUSE_CLUSTER_URL`): a run drops the monthly partitions of `events` older
//! than `EVENTS_RETENTION_DAYS` and nothing else, and a second run drops nothing.

use std::time::{SystemTime, UNIX_EPOCH};

use clickhouse_kit::topology::Topology;
use e2e::unique;

const DAY_MS: i64 = 86_400_000;

fn received(days_ago: i64, session: &str) -> schema::EventRow {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    let envelope =
        contract::event::Envelope::new(now - days_ago * DAY_MS, "pk_r".into(), String::new(), None);
    let body = serde_json::json!({ "eventName": "impression", "experimentId": "exp_1",
        "sessionId": session, "variantId": "var_a" });
    schema::EventRow::from(
        contract::event::EventMessage::from_client(&body, &envelope).expect("valid"),
    )
}

#[tokio::test]
async fn a_retention_run_drops_only_the_months_older_than_the_retention() {
    let database = unique("test_retention_");
    let client = e2e::clickhouse(&database);
    schema::migrate(&client, &database).await.expect("migrates");
    // With 60 days kept: now and 35 days ago stay (the cutoff's month or later); 100 and
    // 400 days ago are whole months before the cutoff's.
    let rows = [
        received(0, "today"),
        received(35, "d35"),
        received(100, "d100"),
        received(400, "d400"),
    ];
    let mut insert = client
        .insert::<schema::EventRow>("events")
        .await
        .expect("insert starts");
    for row in &rows {
        insert.write(row).await.expect("row");
    }
    insert.end().await.expect("insert ends");
    let months: Vec<u32> = client
        .query("SELECT DISTINCT toYYYYMM(received_at) AS m FROM events ORDER BY m")
        .fetch_all()
        .await
        .expect("months");
    assert_eq!(months.len(), 4, "{months:?}");

    let topology = Topology::single(client.clone());
    let started = std::time::Instant::now();
    let dropped = consumer::retention::drop_expired(&topology, &database, 60)
        .await
        .expect("retention runs");
    assert_eq!(dropped, months[..2], "the two oldest months");
    let left: Vec<String> = client
        .query("SELECT session_id FROM events ORDER BY received_at")
        .fetch_all()
        .await
        .expect("rows");
    assert_eq!(left, ["d35", "today"]);
    let again = consumer::retention::drop_expired(&topology, &database, 60)
        .await
        .expect("retention runs again");
    assert_eq!(again, Vec::<u32>::new());
    // A single day kept still keeps the current month.
    let dropped = consumer::retention::drop_expired(&topology, &database, 1)
        .await
        .expect("retention runs");
    assert!(dropped.len() <= 1, "{dropped:?}");
    let today: u64 = client
        .query("SELECT count() FROM events WHERE session_id = 'today'")
        .fetch_one()
        .await
        .expect("count");
    assert_eq!(today, 1);
    eprintln!("retention runs took {:?}", started.elapsed());
    e2e::drop_database(&database).await;
}

#[tokio::test]
async fn cluster_a_retention_run_drops_the_old_months_on_every_replica() {
    use clap::Parser;
    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        clickhouse: clickhouse_kit::ClickHouseArgs,
    }
    let url = std::env::var("TEST_CLICKHOUSE_CLUSTER_URL").unwrap_or_else(|_| {
        "http://127.0.0.1:28123,http://127.0.0.1:28124;\
         http://127.0.0.1:28125,http://127.0.0.1:28126"
            .into()
    });
    let database = unique("test_retention_");
    let args = Args::parse_from([
        "test".to_owned(),
        format!("--clickhouse-url={url}"),
        "--clickhouse-cluster=analytics".to_owned(),
        format!("--clickhouse-database={database}"),
    ])
    .clickhouse;
    let topology = Topology::from_args(&args).expect("cluster");
    schema::migrate_topology(&topology, &database, u32::MAX)
        .await
        .expect("migrates");
    // An old and a current row on each shard.
    for (shard, replicas) in topology.shards.iter().enumerate() {
        let mut insert = replicas[0]
            .client
            .insert::<schema::EventRow>("events_local")
            .await
            .expect("insert starts");
        for days in [0, 100] {
            insert
                .write(&received(days, &format!("s{shard}-{days}")))
                .await
                .expect("row");
        }
        insert.end().await.expect("insert ends");
    }
    for server in topology.servers() {
        server
            .client
            .query(&format!("SYSTEM SYNC REPLICA {database}.events_local"))
            .execute()
            .await
            .expect("synced");
    }
    let dropped = consumer::retention::drop_expired(&topology, &database, 60)
        .await
        .expect("retention runs");
    assert_eq!(dropped.len(), 2, "one old month per shard: {dropped:?}");
    // A replica drops a partition when it reads the drop from the replication log.
    for server in topology.servers() {
        let sessions: Vec<String> = e2e::eventually(
            std::time::Duration::from_secs(30),
            "the old month gone on every replica",
            || async {
                let left: Vec<String> = server
                    .client
                    .query("SELECT session_id FROM events_local")
                    .fetch_all()
                    .await
                    .ok()?;
                (!left.iter().any(|s| s.ends_with("-100"))).then_some(left)
            },
        )
        .await;
        assert_eq!(sessions.len(), 1, "{}: {sessions:?}", server.url);
        assert!(sessions[0].ends_with("-0"));
    }
    let _ = topology.shards[0][0]
        .client
        .query(&format!(
            "DROP DATABASE IF EXISTS {database} ON CLUSTER analytics"
        ))
        .execute()
        .await;
}

//! An erasure beside a grant: whichever starts first, the visitor is left nowhere. The
//! grant's backfill copies a quarter of a million rows, so that it takes seconds, and the
//! erasure starts before the grant and at points of the backfill (each checked to begin
//! before the grant ends).

use std::time::{Duration, Instant};

use clap::Parser;

use super::{grant, migrate, query};

const VICTIM: &str = "pk_a_victim";

/// Rows of the victim in `table` of `database`, read as the operator.
async fn victim_rows(url: &str, database: &str, table: &str) -> String {
    let sql = format!("SELECT count() FROM {database}.{table} WHERE visitor_id = '{VICTIM}'");
    query(url, "default", "", &sql).await.expect("counted")
}

#[tokio::test]
async fn an_erasure_beside_a_grants_backfill_leaves_the_visitor_nowhere() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let root = dir.path().join("clickhouse");
    let (http, tcp) = (e2e::free_port(), e2e::free_port());
    let _server = e2e::ScriptedClickHouse::start(&root, http, tcp);
    let url = format!("http://127.0.0.1:{http}");
    migrate(&url).await;
    let users = root.join("users.d");
    let password = "long enough!";
    let insert = |visitors: &str, rows: u32| {
        format!(
            "INSERT INTO analytics.events (event_id, received_at, public_key, event_name, \
             experiment_id, variant_id, session_id, visitor_id) \
             SELECT generateUUIDv4(), now(), 'pk_a', 'impression', 'exp_a', 'var_a', \
             concat('s', toString(number)), {visitors} FROM numbers({rows})"
        )
    };
    let bulk = insert("concat('pk_a_bulk', toString(number))", 250_000);
    query(&url, "default", "", &bulk).await.expect("bulk rows");
    // The erasure at once (before the grant takes the lock), and into the grant's backfill:
    // from the moment its feeds exist, which it makes just before it copies the rows.
    // A new analyst each time, so that only this grant's feeds are awaited.
    for (user, into_backfill_ms) in [("alice", None), ("bob", Some(0)), ("carol", Some(300))] {
        let victim = insert(&format!("'{VICTIM}'"), 3);
        query(&url, "default", "", &victim)
            .await
            .expect("the victim's rows");
        let erase = tools::erase::EraseConfig::parse_from([
            "analytics-erase",
            &format!("--clickhouse-url={url}"),
            &format!("--visitor-id={VICTIM}"),
        ]);
        let subject = tools::erase::Subject::parse(&erase).expect("an id");
        let erasure = async {
            if let Some(ms) = into_backfill_ms {
                let feeds = format!(
                    "SELECT count() FROM system.tables \
                     WHERE database = 'analytics_access' AND startsWith(name, '{user}__')"
                );
                while query(&url, "default", "", &feeds).await.expect("feeds") == "0" {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let started = Instant::now();
            tools::erase::erase(&erase, &subject).await.expect("erased");
            started
        };
        let granting = async {
            grant(&url, &users, user, password, &["pk_a"], &[]).await;
            Instant::now()
        };
        let (granted, erasing) = tokio::time::timeout(Duration::from_secs(300), async {
            tokio::join!(granting, erasure)
        })
        .await
        .expect("the grant and the erasure end within 300 s");
        if into_backfill_ms.is_some() {
            assert!(
                erasing < granted,
                "the erasure {into_backfill_ms:?} ms into the backfill began after the grant \
                 ended: nothing raced"
            );
        }
        let copy = format!("analyst_{user}");
        for (database, table) in [
            ("analytics", "events"),
            (&copy, "events"),
            (&copy, "experiment_visitors"),
        ] {
            assert_eq!(
                victim_rows(&url, database, table).await,
                "0",
                "{database}.{table}, the erasure {into_backfill_ms:?} ms into the backfill"
            );
        }
    }
}

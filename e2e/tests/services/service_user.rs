//! The consumer's own ClickHouse user as `scripts/up` makes it (stack-kit's
//! `clickhouse::service_user`), on a real 18.16 server of the test's own: with its password it
//! migrates and inserts; without it, it is refused. (That its inserts reach the analysts'
//! copies is `access.rs`'s.)

use clap::Parser;

fn args(url: &str, user: &str, password: &str, database: &str) -> clickhouse_kit::ClickHouseArgs {
    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        clickhouse: clickhouse_kit::ClickHouseArgs,
    }
    Args::parse_from([
        "test".to_owned(),
        format!("--clickhouse-url={url}"),
        format!("--clickhouse-user={user}"),
        format!("--clickhouse-password={password}"),
        format!("--clickhouse-database={database}"),
    ])
    .clickhouse
}

#[tokio::test]
async fn the_consumer_user_migrates_and_inserts_with_its_password_only() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let root = dir.path().join("clickhouse");
    let secret = dir.path().join("secrets/clickhouse-consumer");
    let (http, tcp) = (e2e::free_port(), e2e::free_port());
    stack_kit::clickhouse::service_user(&root, "consumer", &secret).expect("the user made");
    let _server = e2e::ScriptedClickHouse::start(&root, http, tcp);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&secret).expect("secret").permissions(),
    );
    assert_eq!(mode & 0o077, 0, "the secret is its owner's only");
    let password = std::fs::read_to_string(&secret).expect("secret");
    assert_eq!(password.len(), 32);
    let url = format!("http://127.0.0.1:{http}");
    // What scripts/up waits for before it starts the consumer.
    e2e::eventually(
        std::time::Duration::from_secs(30),
        "the consumer's user",
        || {
            let ok = stack_kit::clickhouse::user_ok(http, "consumer", &secret);
            async move { ok.then_some(()) }
        },
    )
    .await;

    let consumer = args(&url, "consumer", &password, "analytics");
    let topology = clickhouse_kit::topology::Topology::from_args(&consumer).expect("topology");
    schema::migrate_topology(&topology, "analytics", u32::MAX)
        .await
        .expect("the consumer's user migrates");
    let client = consumer.client();
    let envelope =
        contract::event::Envelope::new(1_763_700_000_000, "pk_u".into(), String::new(), None);
    let row = schema::EventRow::from(
        contract::event::EventMessage::from_client(
            &serde_json::json!({ "eventName": "page_view", "sessionId": "s", "experimentId": "exp_1" }),
            &envelope,
        )
        .expect("valid"),
    );
    let mut insert = client
        .insert::<schema::EventRow>("events")
        .await
        .expect("insert starts");
    insert.write(&row).await.expect("row");
    insert.end().await.expect("the consumer's user inserts");
    let n: u64 = client
        .query("SELECT count() FROM events")
        .fetch_one()
        .await
        .expect("count");
    assert_eq!(n, 1);

    for (user, password) in [("consumer", ""), ("consumer", "wrong")] {
        let refused = args(&url, user, password, "analytics")
            .client()
            .query("SELECT count() FROM events")
            .fetch_one::<u64>()
            .await;
        assert!(refused.is_err(), "{user} with {password:?} was let in");
    }
}

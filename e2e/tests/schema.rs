//! The analysts' schema on the real ClickHouse of the tests.

use e2e::unique;

#[tokio::test]
async fn migrations_create_the_schema_once_and_rerun_as_a_no_op() {
    let database = unique("test_");
    let client = e2e::clickhouse(&database);
    consumer::schema::migrate(&client, &database)
        .await
        .expect("first run");
    consumer::schema::migrate(&client, &database)
        .await
        .expect("second run");

    let versions: Vec<u32> = client
        .query("SELECT version FROM schema_migrations ORDER BY version")
        .fetch_all()
        .await
        .expect("migrations recorded");
    assert_eq!(versions, [1], "each migration recorded once");

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

#[tokio::test]
async fn a_redelivered_event_counts_once_with_final() {
    let database = unique("test_");
    let client = e2e::clickhouse(&database);
    consumer::schema::migrate(&client, &database)
        .await
        .expect("migrates");
    let envelope = common::event::Envelope {
        received_at: 1_763_700_000_000,
        public_key: "pk_x".into(),
        user_agent: String::new(),
    };
    let message = common::event::EventMessage::from_client(
        &serde_json::json!({ "eventName": "impression", "experimentId": "exp_1", "sessionId": "s" }),
        &envelope,
    )
    .expect("valid");
    for _ in 0..2 {
        let mut insert = client
            .insert::<consumer::EventRow>("events")
            .await
            .expect("insert starts");
        insert
            .write(&consumer::EventRow::from(message.clone()))
            .await
            .expect("row written");
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

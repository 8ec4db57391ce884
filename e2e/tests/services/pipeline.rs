//! The walking skeleton end to end: experiments served per key through the live gate, and
//! events posted to the ingest found, field by field, in ClickHouse.

use std::time::Duration;

use e2e::{ConsumerNames, SnapshotFile};
use schema::EventRow;
use serde_json::{Value, json};

fn variant(id: &str, weight: u32, control: bool, headline: &str) -> Value {
    json!({ "id": id, "weight": weight, "control": control, "parts": { "headline": headline } })
}

fn snapshot() -> Value {
    json!({
        "version": "e2e-1",
        "experiments": [
            { "id": "exp_a_live", "status": "live",
              "variants": [variant("var_a1", 50, true, "Hello"), variant("var_a2", 50, false, "Grüß dich ✨")] },
            { "id": "exp_a_draft", "status": "draft", "variants": [variant("var_d", 100, true, "draft")] },
            { "id": "exp_shared", "status": "live", "startAt": "2020-01-01T00:00:00Z",
              "variants": [variant("var_s", 100, true, "shared")] },
            { "id": "exp_a_over", "status": "live", "endAt": "2021-01-01T00:00:00Z",
              "variants": [variant("var_o", 100, true, "over")] },
            { "id": "exp_b_live", "status": "live", "variants": [variant("var_b", 100, true, "B")] }
        ],
        "keys": [
            { "publicKey": "pk_e2e_a", "experiments": ["exp_a_live", "exp_a_draft", "exp_shared", "exp_a_over"] },
            { "publicKey": "pk_e2e_b", "experiments": ["exp_b_live", "exp_shared"] }
        ]
    })
}

async fn experiments(client: &reqwest::Client, url: &str, key: &str) -> Value {
    let response = client
        .get(url)
        .header("X-public-key", key)
        .header("Accept", "application/json")
        .send()
        .await
        .expect("config-api answers");
    assert_eq!(response.status(), 200);
    response.json().await.expect("JSON body")
}

#[tokio::test]
async fn events_travel_to_clickhouse_and_experiments_are_served_per_key() {
    let file = SnapshotFile::new(&snapshot());
    let names = ConsumerNames::unique();
    let (consumer, stats) = e2e::start_consumer_counted(e2e::consumer_config(&names, &[])).await;
    let ingest = e2e::start_ingest(e2e::ingest_config(&file.path, &names.topic, &[])).await;
    let config_api = e2e::start_config_api(&file.path).await;
    let http = reqwest::Client::new();

    // Experiments: the key's live ones, in the key's order, exactly the contract's shape
    // with the phase (an extension; 1 when the snapshot says none).
    let url = config_api.url("/api/v1/experiments");
    let a = experiments(&http, &url, "pk_e2e_a").await;
    assert_eq!(
        a,
        json!({ "experiments": [
            { "id": "exp_a_live", "phase": 1, "variants": [
                { "id": "var_a1", "weight": 50, "control": true, "parts": { "headline": "Hello" } },
                { "id": "var_a2", "weight": 50, "control": false, "parts": { "headline": "Grüß dich ✨" } }] },
            { "id": "exp_shared", "phase": 1, "variants": [
                { "id": "var_s", "weight": 100, "control": true, "parts": { "headline": "shared" } }] }
        ]})
    );
    let b = experiments(&http, &url, "pk_e2e_b").await;
    let ids: Vec<&str> = b["experiments"]
        .as_array()
        .expect("array")
        .iter()
        .map(|e| e["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["exp_b_live", "exp_shared"]);

    // Events: posted through the ingest, found in ClickHouse.
    let session = e2e::unique("session-");
    let event_id = uuid::Uuid::new_v4();
    let body = json!({ "events": [
        { "eventId": event_id.to_string(), "eventName": "click", "experimentId": "exp_a_live",
          "sessionId": session, "variantId": "var_a2", "conversion": true, "loadTime": 812.5,
          "scrollDepth": 42, "timeOnPage": 15000, "clickTarget": "#buy-now", "pathname": "/pricing",
          "referrer": "", "utm_source": "news", "utm_medium": "email", "utm_campaign": "autumn",
          "utm_term": "coffee beans", "utm_content": "hero-link", "test": true },
        { "eventName": "impression", "experimentId": "exp_a_live", "sessionId": session },
        { "eventName": "my_custom_event", "experimentId": "exp_shared", "sessionId": session }
    ]});
    let response = http
        .post(ingest.url("/api/v1/analytics"))
        .header("X-public-key", "pk_e2e_a")
        .header("User-Agent", "e2e-test/1.0")
        .json(&body)
        .send()
        .await
        .expect("ingest answers");
    assert_eq!(response.status(), 202);
    let answer: Value = response.json().await.expect("JSON body");
    assert_eq!(answer, json!({ "accepted": 3, "rejected": [] }));

    let ch = e2e::clickhouse(&names.database);
    let rows: Vec<EventRow> =
        e2e::eventually(Duration::from_secs(120), "3 rows in ClickHouse", || {
            let ch = ch.clone();
            async move {
                let rows: Vec<EventRow> = ch
                    .query("SELECT ?fields FROM events FINAL ORDER BY event_name")
                    .fetch_all()
                    .await
                    .ok()?;
                (rows.len() >= 3).then_some(rows)
            }
        })
        .await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    let click = &rows[0];
    assert_eq!(click.event_id, event_id);
    assert_eq!(
        (
            click.event_name.as_str(),
            click.experiment_id.as_str(),
            click.session_id.as_str()
        ),
        ("click", "exp_a_live", session.as_str())
    );
    assert_eq!(click.public_key, "pk_e2e_a");
    assert_eq!(click.variant_id, "var_a2");
    assert_eq!(click.conversion, Some(1));
    assert_eq!(
        (click.load_time, click.scroll_depth, click.time_on_page),
        (Some(812.5), Some(42.0), Some(15000.0))
    );
    assert_eq!(
        (click.click_target.as_str(), click.pathname.as_str()),
        ("#buy-now", "/pricing")
    );
    assert_eq!(click.referrer, "");
    assert_eq!(
        [
            &click.utm_source,
            &click.utm_medium,
            &click.utm_campaign,
            &click.utm_term,
            &click.utm_content
        ],
        ["news", "email", "autumn", "coffee beans", "hero-link"]
    );
    assert_eq!(click.test, 1);
    assert_eq!(click.user_agent, "e2e-test/1.0");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as u32;
    assert!(
        now.abs_diff(click.received_at) < 300,
        "received_at {}",
        click.received_at
    );

    let impression = &rows[1];
    assert_eq!(impression.event_name, "impression");
    assert_eq!(
        impression.event_id.get_version_num(),
        7,
        "server-assigned UUIDv7"
    );
    assert_eq!((impression.conversion, impression.load_time), (None, None));
    assert_eq!((impression.variant_id.as_str(), impression.test), ("", 0));
    assert_eq!(rows[2].event_name, "my_custom_event");
    assert_eq!(rows[2].experiment_id, "exp_shared");

    // A client retry of the same event (same eventId) is stored twice, counted once.
    let retry = json!({ "events": [body["events"][0].clone()] });
    let response = http
        .post(ingest.url("/api/v1/analytics"))
        .header("X-public-key", "pk_e2e_a")
        .json(&retry)
        .send()
        .await
        .expect("ingest answers");
    assert_eq!(response.status(), 202);
    // Stored twice: the consumer's own count of the rows it inserted (a count of raw rows
    // could see the two copies already merged into one).
    let inserted = || {
        stats
            .rows_inserted
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    e2e::eventually(
        Duration::from_secs(60),
        "the retried row inserted",
        || async { (inserted() >= 4).then_some(()) },
    )
    .await;
    assert_eq!(inserted(), 4, "three rows, then the retried one");
    let counted: u64 = ch
        .query("SELECT count() FROM events FINAL")
        .fetch_one()
        .await
        .expect("count");
    assert_eq!(counted, 3, "FINAL counts the retried event once");
    let clicks: u64 = ch
        .query("SELECT count() FROM events FINAL WHERE event_id = toUUID(?)")
        .bind(event_id.to_string())
        .fetch_one()
        .await
        .expect("count");
    assert_eq!(clicks, 1, "the retried event once");

    ingest.stop().await.expect("ingest stops cleanly");
    config_api.stop().await.expect("config-api stops cleanly");
    consumer.stop().await.expect("consumer stops cleanly");
    e2e::drop_database(&names.database).await;
}

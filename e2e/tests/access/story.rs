//! The analyst's story on one server, in steps that each fail alone (`e2e::Steps`):
//! refused grants, the copies' rows, forged definitions, other users' queries, the caps,
//! a flood, an abandoned query, the hourly quota, erasure, a second key and a revocation.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;

use super::{
    access_run, attacks, definitions, digest, fill, grant, metric_definitions, migrate, query,
    refresh_metric_values, refused_all,
};

const ALICE_PW: &str = "alice's long password";
const BOB_PW: &str = "bob's long password!";
const CAROL_PW: &str = "carol's long password";
const CAPS: [&str; 8] = [
    "--max-execution-secs",
    "3",
    "--max-concurrent-queries",
    "2",
    "--max-result-rows",
    "1000",
    "--max-memory-mib",
    "256",
];

/// A server of the story's own, migrated and filled, with the consumer's user.
struct Story {
    // The server first: fields drop in their order.
    _server: e2e::ScriptedClickHouse,
    _dir: tempfile::TempDir,
    url: String,
    users: PathBuf,
    consumer: (String, String),
}

impl Story {
    async fn begin() -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        let root = dir.path().join("clickhouse");
        let (http, tcp) = (e2e::free_port(), e2e::free_port());
        // The consumer's own user, as scripts/up makes it: after the grants it inserts the
        // events, definitions and metric values, which the feeds copy with its rights.
        let secret = dir.path().join("secrets/clickhouse-consumer");
        stack_kit::clickhouse::service_user(&root, "consumer", &secret).expect("the user made");
        let consumer_pw = std::fs::read_to_string(&secret).expect("the consumer's password");
        let server = e2e::ScriptedClickHouse::start(&root, http, tcp);
        let story = Self {
            _server: server,
            _dir: dir,
            url: format!("http://127.0.0.1:{http}"),
            users: root.join("users.d"),
            consumer: ("consumer".to_owned(), consumer_pw),
        };
        migrate(&story.url).await;
        fill(&story.url, 0, ("default", "")).await;
        story.admin(definitions("v1", false)).await;
        story.admin(definitions("v2", true)).await;
        story.admin(metric_definitions("v1", false)).await;
        story.admin(metric_definitions("v2", true)).await;
        refresh_metric_values(&story.url, ("default", "")).await;
        story
    }

    /// `sql` as the operator (`default`), which must succeed.
    async fn admin(&self, sql: String) -> String {
        query(&self.url, "default", "", &sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    fn consumer(&self) -> (&str, &str) {
        (&self.consumer.0, &self.consumer.1)
    }

    async fn grant(&self, user: &str, password: &str, keys: &[&str], extra: &[&str]) {
        grant(&self.url, &self.users, user, password, keys, extra).await;
    }
}

#[tokio::test]
async fn an_analyst_reads_only_their_keys_rows_by_every_path_within_caps() {
    let story = Story::begin().await;
    let mut steps = e2e::Steps::default();
    steps
        .run(
            "bad grants",
            bad_grants_are_refused_before_anything_is_sent(&story),
        )
        .await;
    // Alice and bob granted; rows that arrive after the grant reach the copies too,
    // written by the consumer's user (the feeds run with its rights).
    story.grant("alice", ALICE_PW, &["pk_a"], &CAPS).await;
    story.grant("bob", BOB_PW, &["pk_b"], &CAPS).await;
    assert_eq!(
        access_run(&story.url, &story.users, &["list"]).await,
        "alice\tpk_a\nbob\tpk_b\n"
    );
    fill(&story.url, 1, story.consumer()).await;
    for sql in [definitions("v3", true), metric_definitions("v3", true)] {
        let (user, password) = story.consumer();
        query(&story.url, user, password, &sql)
            .await
            .unwrap_or_else(|e| panic!("the consumer's user writes {sql}: {e}"));
    }
    refresh_metric_values(&story.url, story.consumer()).await;

    for (user, password, key, other, other_user) in [
        ("alice", ALICE_PW, "pk_a", "pk_b", "bob"),
        ("bob", BOB_PW, "pk_b", "pk_a", "alice"),
    ] {
        steps
            .run(
                &format!("{user}'s rows"),
                each_table_shows_the_keys_rows(&story, user, password, key),
            )
            .await;
        steps
            .run(
                &format!("{user}'s definitions"),
                only_definitions_that_list_the_key(&story, user, password, key, other),
            )
            .await;
        steps
            .run(
                &format!("{user}'s attacks"),
                nothing_else_by_any_path(&story, user, password, other, other_user),
            )
            .await;
    }
    steps
        .run("forged definitions", forged_definitions_stay_out(&story))
        .await;
    steps
        .run(
            "others' queries",
            another_users_query_cannot_be_killed(&story),
        )
        .await;
    steps.run("caps", the_caps_hold(&story)).await;
    steps
        .run("flood", a_flood_leaves_the_others_room(&story))
        .await;
    steps
        .run("abandoned", an_abandoned_query_ends_by_the_cap(&story))
        .await;
    steps.run("quota", the_hourly_quota_refuses(&story)).await;
    steps
        .run("erasure", erasure_reaches_the_copies(&story))
        .await;
    steps
        .run("second key, revoke", a_second_key_then_a_revocation(&story))
        .await;
    steps.end();
}

/// Refused before anything is sent: exit code 2 from the binary, nothing made.
async fn bad_grants_are_refused_before_anything_is_sent(story: &Story) {
    let bin = e2e::workspace_binary("analytics-access");
    let grant_args = |user: &str, password: &str, key: &str, extra: &[&str]| {
        let mut args: Vec<String> = ["grant", "--user", user, "--password", password]
            .map(str::to_owned)
            .into();
        args.extend(["--key".to_owned(), key.to_owned()]);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    };
    let good = "long enough!";
    for bad in [
        grant_args("alice", "short", "pk_a", &[]),
        grant_args("alice", good, "pk_a') OR 1 --", &[]),
        grant_args("alice", good, "pk_a", &["--max-execution-secs", "0"]),
        grant_args("alice", good, "pk_a", &["--max-memory-mib", "0"]),
        grant_args(
            "alice",
            good,
            "pk_a",
            &["--network", "127.0.0.2</ip><ip>::/0"],
        ),
        grant_args("alice", good, "pk_a", &["--network", "10.0.0.0/33"]),
        grant_args("default", good, "pk_a", &[]),
    ] {
        let out = Command::new(&bin)
            .args(&bad)
            .env("CLICKHOUSE_URL", &story.url)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("refusing"));
    }
    assert_eq!(
        story
            .admin("SELECT count() FROM system.databases WHERE name LIKE 'analyst%'".into())
            .await,
        "0"
    );
}

/// Every table and view with a public_key, as the analyst sees it and as the operator
/// sees the key's rows: the same rows.
async fn each_table_shows_the_keys_rows(story: &Story, user: &str, password: &str, key: &str) {
    let tables = story
        .admin(
            "SELECT DISTINCT table FROM system.columns WHERE database = 'analytics' \
             AND name = 'public_key' AND NOT startsWith(table, '.inner') ORDER BY table"
                .into(),
        )
        .await;
    let tables: Vec<&str> = tables.lines().collect();
    for expected in [
        "events",
        "experiment_results",
        "experiment_results_over_time",
        "experiment_visitors",
        "experiment_variant_counts",
        "visitor_metric_values",
        "visitor_event_counts",
    ] {
        assert!(tables.contains(&expected), "{expected} in {tables:?}");
    }
    let mut rows_seen = 0;
    for table in &tables {
        let engine = story
            .admin(format!(
                "SELECT engine FROM system.tables WHERE database = 'analytics' AND name = '{table}'"
            ))
            .await;
        let final_ = if engine.contains("MergeTree") {
            " FINAL"
        } else {
            ""
        };
        // Every column but `as_of`, the time of each query.
        let columns = story
            .admin(format!(
                "SELECT arrayStringConcat(groupArray(concat('`', name, '`')), ', ') \
                 FROM system.columns WHERE database = 'analytics' AND table = '{table}' \
                 AND name != 'as_of'"
            ))
            .await;
        let digest = |from: String| {
            format!("SELECT count(), sum(cityHash64(toString(tuple({columns})))) FROM {from}")
        };
        let theirs = query(
            &story.url,
            user,
            password,
            &digest(format!("analyst_{user}.{table}{final_}")),
        )
        .await
        .unwrap_or_else(|e| panic!("{user} reads {table}: {e}"));
        let truth = story
            .admin(digest(format!(
                "analytics.{table}{final_} WHERE public_key = '{key}'"
            )))
            .await;
        assert_eq!(theirs, truth, "{user}'s {table}");
        rows_seen += theirs
            .split('\t')
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .expect("a count");
    }
    assert!(rows_seen > 0, "{user} saw no rows at all");
}

/// The definitions that list their keys, never those that list none (v1: before the keys
/// were recorded, whatever events the analyst sent) nor the other site's; their
/// experiments' metrics likewise, by the same rule.
async fn only_definitions_that_list_the_key(
    story: &Story,
    user: &str,
    password: &str,
    key: &str,
    other: &str,
) {
    let experiment = if user == "alice" { "exp_a" } else { "exp_b" };
    let listed = format!("experiment_id = '{experiment}' AND has(public_keys, '{key}')");
    for table in ["experiment_variants", "experiment_metrics"] {
        let theirs = query(
            &story.url,
            user,
            password,
            &digest(&format!("analyst_{user}.{table} FINAL")),
        )
        .await;
        let truth = story
            .admin(digest(&format!("analytics.{table} FINAL WHERE {listed}")))
            .await;
        assert_eq!(theirs.as_deref(), Ok(truth.as_str()), "{user}'s {table}");
        if table == "experiment_metrics" {
            assert!(
                truth.starts_with("4\t"),
                "v2 and v3, two metrics each: {truth}"
            );
        }
    }
    assert_eq!(
        query(
            &story.url,
            user,
            password,
            &format!(
                "SELECT count() FROM analyst_{user}.experiment_metrics \
                 WHERE experiment_id != '{experiment}' OR metric_id = 'metric_{other}'"
            ),
        )
        .await
        .as_deref(),
        Ok("0"),
        "{user} reads another site's metrics"
    );
}

/// Every attack refused without a word of the other key's data, and the system tables
/// show nothing of the other databases.
async fn nothing_else_by_any_path(
    story: &Story,
    user: &str,
    password: &str,
    other: &str,
    other_user: &str,
) {
    let own = format!("analyst_{user}");
    refused_all(
        &story.url,
        user,
        password,
        other,
        &attacks(&own, other_user),
    )
    .await;
    for sql in [
        format!(
            "SELECT count() FROM system.tables WHERE database != 'system' AND database != '{own}'"
        ),
        format!("SELECT count() FROM system.parts WHERE database != '{own}'"),
        format!("SELECT count() FROM system.columns WHERE database NOT IN ('system', '{own}')"),
        "SELECT count() FROM system.mutations".to_owned(),
    ] {
        assert_eq!(
            query(&story.url, user, password, &sql).await.as_deref(),
            Ok("0"),
            "{user}: {sql}"
        );
    }
}

/// What anyone can send with their own key: an event of another site's experiment, whose
/// definitions of before the keys were recorded list no key (v1). Once they went to
/// whoever had their events; at the next grant, alice's copy still has none of them.
async fn forged_definitions_stay_out(story: &Story) {
    story
        .admin(
            "INSERT INTO analytics.events (event_id, received_at, public_key, event_name, \
             experiment_id, variant_id, session_id, visitor_id) SELECT generateUUIDv4(), \
             now(), 'pk_a', 'impression', 'exp_b', 'var_a', 's_forged', 'pk_a_forged'"
                .into(),
        )
        .await;
    story.grant("alice", ALICE_PW, &["pk_a"], &CAPS).await;
    for table in ["experiment_variants", "experiment_metrics"] {
        assert_eq!(
            query(
                &story.url,
                "alice",
                ALICE_PW,
                &format!(
                    "SELECT count() FROM analyst_alice.{table} \
                     WHERE experiment_id != 'exp_a' OR empty(public_keys)"
                ),
            )
            .await
            .as_deref(),
            Ok("0"),
            "alice reads {table} that list none of her keys"
        );
    }
}

/// Another user's query cannot be killed, and a wrong password is not let in.
async fn another_users_query_cannot_be_killed(story: &Story) {
    let operator = {
        let url = story.url.clone();
        tokio::spawn(async move { query(&url, "default", "", "SELECT sleep(2)").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let kill = query(
        &story.url,
        "alice",
        ALICE_PW,
        "KILL QUERY WHERE user = 'default' SYNC",
    )
    .await;
    assert!(kill.is_err(), "{kill:?}");
    assert!(
        operator.await.expect("joined").is_ok(),
        "the operator's query was killed"
    );
    assert!(
        query(&story.url, "alice", "wrong password!!", "SELECT 1")
            .await
            .is_err(),
        "a wrong password is let in"
    );
}

/// The caps: time, result size, memory, settings that would lift them.
async fn the_caps_hold(story: &Story) {
    for (sql, expected) in [
        ("SELECT count() FROM system.numbers", "Timeout exceeded"),
        (
            "SELECT number FROM system.numbers LIMIT 5000",
            "Limit for result",
        ),
        ("SELECT length(range(toUInt32(100000000)))", "Memory limit"),
    ] {
        let started = Instant::now();
        let answer = query(&story.url, "alice", ALICE_PW, sql).await;
        assert!(
            answer.as_ref().is_err_and(|e| e.contains(expected)),
            "{sql}: {answer:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{sql} ran {:?}",
            started.elapsed()
        );
    }
    for params in [
        "max_execution_time=0",
        "readonly=0",
        "max_memory_usage=0",
        "max_concurrent_queries_for_user=0",
    ] {
        let url = format!("{}/?{params}", story.url);
        let answer = query(&url, "alice", ALICE_PW, "SELECT 1").await;
        assert!(answer.is_err(), "{params}: {answer:?}");
    }
}

/// 100 long queries at once from one analyst while the consumer inserts: the analyst gets
/// their two, the others are refused at once, and the operators and the consumer go on.
async fn a_flood_leaves_the_others_room(story: &Story) {
    let long: Vec<_> = (0..100)
        .map(|_| {
            let url = story.url.clone();
            tokio::spawn(async move {
                query(
                    &url,
                    "alice",
                    ALICE_PW,
                    "SELECT count() FROM system.numbers",
                )
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let operator = query(&story.url, "default", "", "SELECT 1").await;
    fill(&story.url, 2, story.consumer()).await;
    let mut refused = 0;
    for task in long {
        let answer = task.await.expect("joined");
        let text = answer.expect_err("every long query fails (timeout or refusal)");
        if text.contains("Too many simultaneous queries") {
            refused += 1;
        } else {
            assert!(text.contains("Timeout exceeded"), "{text}");
        }
    }
    println!(
        "100 concurrent analyst queries: {refused} refused at once, {} ran to the cap",
        100 - refused
    );
    assert!(refused >= 98, "{refused} refused");
    assert_eq!(
        operator.as_deref(),
        Ok("1"),
        "the operator's query while the analyst floods"
    );
}

/// A client that goes: its query ends by the cap, not by itself.
async fn an_abandoned_query_ends_by_the_cap(story: &Story) {
    let abandoned = reqwest::Client::new()
        .post(&story.url)
        .basic_auth("alice", Some(ALICE_PW))
        .timeout(Duration::from_millis(500))
        .body("SELECT count() FROM system.numbers")
        .send()
        .await;
    assert!(abandoned.is_err(), "{abandoned:?}");
    let gone = Instant::now();
    let running = "SELECT count() FROM system.processes WHERE user = 'alice'";
    assert_eq!(
        story.admin(running.into()).await,
        "1",
        "the abandoned query runs"
    );
    while story.admin(running.into()).await != "0" {
        assert!(
            gone.elapsed() < Duration::from_secs(8),
            "an abandoned query still runs"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "an abandoned analyst query ended {:?} after its client left",
        gone.elapsed()
    );
}

/// An hourly quota: the sixth query of the hour is refused.
async fn the_hourly_quota_refuses(story: &Story) {
    story
        .grant("carol", CAROL_PW, &["pk_a"], &["--queries-per-hour", "5"])
        .await;
    let mut answers = Vec::new();
    for _ in 0..8 {
        answers.push(query(&story.url, "carol", CAROL_PW, "SELECT 1").await);
    }
    assert!(
        answers
            .iter()
            .any(|a| a.as_ref().is_err_and(|e| e.contains("Quota"))),
        "{answers:?}"
    );
}

/// Erasure reaches the copies: a pk_a visitor is gone from alice's and carol's.
async fn erasure_reaches_the_copies(story: &Story) {
    let visitor = "pk_a_v0_0";
    let erase = tools::erase::EraseConfig::parse_from([
        "analytics-erase",
        &format!("--clickhouse-url={}", story.url),
        &format!("--visitor-id={visitor}"),
    ]);
    let subject = tools::erase::Subject::parse(&erase).expect("an id");
    let erased = tools::erase::erase(&erase, &subject).await.expect("erased");
    assert!(
        erased
            .rows
            .iter()
            .any(|(t, n)| t == "analyst_alice.events" && *n > 0),
        "{erased:?}"
    );
    for copy in ["analyst_alice", "analyst_carol", "analytics"] {
        for table in ["events", "experiment_visitors"] {
            let sql = format!("SELECT count() FROM {copy}.{table} WHERE visitor_id = '{visitor}'");
            assert_eq!(story.admin(sql).await, "0", "{copy}.{table}");
        }
    }
}

/// A second key for alice: her copy made anew, with both sites' rows. Bob revoked:
/// refused, his copy and feeds gone; revoking again changes nothing and succeeds.
async fn a_second_key_then_a_revocation(story: &Story) {
    story.grant("alice", ALICE_PW, &["pk_a", "pk_b"], &[]).await;
    assert_eq!(
        query(
            &story.url,
            "alice",
            ALICE_PW,
            &digest("analyst_alice.events FINAL")
        )
        .await,
        Ok(story.admin(digest("analytics.events FINAL")).await)
    );
    access_run(&story.url, &story.users, &["revoke", "--user", "bob"]).await;
    assert!(
        query(&story.url, "bob", BOB_PW, "SELECT 1").await.is_err(),
        "bob is still let in"
    );
    assert_eq!(
        story
            .admin(
                "SELECT count() FROM system.tables WHERE database = 'analyst_bob' OR \
                 (database = 'analytics_access' AND startsWith(name, 'bob__'))"
                    .into()
            )
            .await,
        "0"
    );
    assert_eq!(
        access_run(&story.url, &story.users, &["list"]).await,
        "alice\tpk_a,pk_b\ncarol\tpk_a\n"
    );
    access_run(&story.url, &story.users, &["revoke", "--user", "bob"]).await;
}

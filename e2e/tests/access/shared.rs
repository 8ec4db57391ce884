//! An experiment that two sites serve: an analyst of one sees its definitions, but not
//! that the other site serves it too.

use super::{grant, migrate, query};

/// Definitions of `exp_shared` listing both keys, at `loaded_at`.
fn shared_definitions(loaded_at: u32) -> [String; 2] {
    [
        format!(
            "INSERT INTO analytics.experiment_variants (experiment_id, variant_id, version, \
             weight, is_control, status, parts, loaded_at, public_keys) VALUES \
             ('exp_shared', 'var_a', 'v{loaded_at}', 100, 1, 'live', '{{}}', {loaded_at}, \
             ['pk_a', 'pk_b'])"
        ),
        format!(
            "INSERT INTO analytics.experiment_metrics (experiment_id, version, phase, \
             metric_id, role, position, kind, loaded_at, public_keys) VALUES \
             ('exp_shared', 'v{loaded_at}', 1, 'conversion', 'goal', 0, 'proportion', \
             {loaded_at}, ['pk_b', 'pk_a'])"
        ),
    ]
}

#[tokio::test]
async fn a_copy_lists_only_the_analysts_own_keys_on_a_shared_experiment() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let root = dir.path().join("clickhouse");
    let (http, tcp) = (e2e::free_port(), e2e::free_port());
    let _server = e2e::ScriptedClickHouse::start(&root, http, tcp);
    let url = format!("http://127.0.0.1:{http}");
    migrate(&url).await;
    let admin = |sql: String| {
        let url = url.clone();
        async move { query(&url, "default", "", &sql).await.expect(&sql) }
    };
    // Stored before the grant (the backfill), then after it (the feeds).
    for sql in shared_definitions(1) {
        admin(sql).await;
    }
    let password = "long enough!";
    grant(
        &url,
        &root.join("users.d"),
        "alice",
        password,
        &["pk_a"],
        &[],
    )
    .await;
    for sql in shared_definitions(2) {
        admin(sql).await;
    }
    for table in ["experiment_variants", "experiment_metrics"] {
        let sql = format!(
            "SELECT groupArray(loaded_at), groupUniqArrayArray(public_keys) FROM \
             (SELECT loaded_at, public_keys FROM analyst_alice.{table} ORDER BY loaded_at)"
        );
        let seen = query(&url, "alice", password, &sql)
            .await
            .expect("alice reads");
        assert_eq!(seen, "[1,2]\t['pk_a']", "alice's {table}");
    }
}

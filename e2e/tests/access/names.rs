//! Analysts whose names are prefixes of each other: an operation on one never touches
//! the other's objects.

use super::{access_run, fill, grant, migrate, query};

/// Analysts whose names are prefixes of each other (`x`, `x_`): granting again or revoking
/// `x` leaves `x_`'s copy fed. Their feeds are `x__events` and `x___events`, both starting
/// with `x__`.
#[tokio::test]
async fn revoking_an_analyst_leaves_one_whose_name_it_prefixes_fed() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let root = dir.path().join("clickhouse");
    let (http, tcp) = (e2e::free_port(), e2e::free_port());
    let _server = e2e::ScriptedClickHouse::start(&root, http, tcp);
    let url = format!("http://127.0.0.1:{http}");
    migrate(&url).await;
    let users = root.join("users.d");
    let password = "long enough!";
    grant(&url, &users, "x_", password, &["pk_b"], &[]).await;
    grant(&url, &users, "x", password, &["pk_a"], &[]).await;
    let rows = |round: usize| {
        let url = url.clone();
        async move {
            let sql = format!(
                "SELECT count() FROM analyst_x_.events WHERE startsWith(session_id, 's{round}_')"
            );
            query(&url, "x_", password, &sql).await.expect("x_ reads")
        }
    };
    fill(&url, 0, ("default", "")).await;
    assert_ne!(rows(0).await, "0", "x_'s copy is fed");

    grant(&url, &users, "x", password, &["pk_a"], &[]).await;
    fill(&url, 1, ("default", "")).await;
    assert_ne!(rows(1).await, "0", "x granted again: x_'s copy still fed");

    access_run(&url, &users, &["revoke", "--user", "x"]).await;
    fill(&url, 2, ("default", "")).await;
    assert_ne!(rows(2).await, "0", "x revoked: x_'s copy still fed");
}

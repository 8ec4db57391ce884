//! Modern servers (21 and later): an analyst is a SQL user with grants, a quota and a row
//! policy per table.

use super::common::{ANALYST_ROLE, Caps, default_caps, grants_table, key_list, sha256_hex};

/// The tables (and views) an analyst reads: those of `database` with a `public_key`
/// column; in a cluster, the Distributed ones rather than the shards' parts.
pub(super) fn readable(columns: &[(String, String)], local: &str) -> Vec<String> {
    let mut tables: Vec<String> = columns
        .iter()
        .filter(|(table, column)| {
            column == "public_key"
                && !table.starts_with(".inner")
                && (local.is_empty() || !table.ends_with(local))
        })
        .map(|(table, _)| table.clone())
        .collect();
    tables.sort_unstable();
    tables.dedup();
    tables
}

/// SQL access control: what a grant sends to each server.
pub fn sql_grant(
    database: &str,
    tables: &[String],
    user: &str,
    password: &str,
    keys: &[String],
    networks: &[String],
    caps: &Caps,
) -> Vec<String> {
    let hash = sha256_hex(password);
    let hosts = networks
        .iter()
        .map(|n| format!("IP '{n}'"))
        .collect::<Vec<_>>()
        .join(", ");
    // A client that has gone takes its query with it.
    let mut settings = caps.settings();
    settings.push((
        "cancel_http_readonly_queries_on_client_close",
        "1".to_owned(),
    ));
    let settings = settings
        .iter()
        .map(|(name, value)| match value.parse::<u64>() {
            Ok(_) => format!("{name} = {value}"),
            Err(_) => format!("{name} = '{value}'"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut sql = vec![
        format!("CREATE ROLE IF NOT EXISTS {ANALYST_ROLE}"),
        format!(
            "CREATE USER IF NOT EXISTS {user} IDENTIFIED WITH sha256_hash BY '{hash}' \
             HOST {hosts} SETTINGS readonly = 1"
        ),
        format!(
            "ALTER USER {user} IDENTIFIED WITH sha256_hash BY '{hash}' HOST {hosts} \
             SETTINGS {settings}"
        ),
        format!(
            "CREATE QUOTA OR REPLACE {user} FOR INTERVAL 1 hour MAX queries = {}, \
             execution_time = {} TO {user}",
            caps.queries_per_hour, caps.execution_secs_per_hour
        ),
        format!("REVOKE ALL ON *.* FROM {user}"),
        format!("GRANT {ANALYST_ROLE} TO {user}"),
        format!("ALTER USER {user} DEFAULT ROLE {ANALYST_ROLE}"),
    ];
    for table in tables {
        sql.push(format!("GRANT SELECT ON {database}.{table} TO {user}"));
        sql.push(format!(
            "CREATE ROW POLICY OR REPLACE {user} ON {database}.{table} FOR SELECT \
             USING public_key IN ({}) TO {user}",
            key_list(keys)
        ));
        sql.push(format!(
            "CREATE ROW POLICY IF NOT EXISTS everyone_else ON {database}.{table} FOR SELECT \
             USING 1 TO ALL EXCEPT {ANALYST_ROLE}"
        ));
    }
    sql
}

/// SQL access control: what a revocation sends to each server.
pub fn sql_revoke(database: &str, tables: &[String], user: &str) -> Vec<String> {
    let mut sql = vec![
        format!("DROP USER IF EXISTS {user}"),
        format!("DROP QUOTA IF EXISTS {user}"),
    ];
    for table in tables {
        sql.push(format!(
            "DROP ROW POLICY IF EXISTS {user} ON {database}.{table}"
        ));
    }
    sql
}

/// What a grant sends to a modern server, for checking with chdb (tables of the schema).
pub fn modern_statements(database: &str, tables: &[String]) -> Vec<String> {
    let keys = ["pk_a".to_owned(), "pk_b".to_owned()];
    let mut sql = grants_table().to_vec();
    sql.extend(sql_grant(
        database,
        tables,
        "alice",
        "a password of 12",
        &keys,
        &["10.0.0.0/8".to_owned(), "127.0.0.2".to_owned()],
        &default_caps(),
    ));
    sql.extend(sql_revoke(database, tables, "alice"));
    sql
}

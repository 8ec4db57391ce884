//! The `analytics-access` command: read-only ClickHouse users for analysts, each seeing the
//! rows of the public keys granted to them and nothing else.
//!
//! Two mechanisms, chosen per server by [`ServerCaps::has_sql_access`] as the migrations
//! choose theirs:
//! - **SQL access control** (modern servers): a user with `readonly = 1`, `SELECT` on each
//!   table and view of the analysts' database that has a `public_key` column, and a row
//!   policy on each that keeps the granted keys. Other users keep every row through a
//!   permissive policy for all but the role `analytics_analyst`.
//! - **18.x** has no grants and ignores users.xml row filters. The analyst gets a database
//!   of their own, `analyst_NAME`, that only they may read (`allow_databases`), holding for
//!   each such table a Distributed table that reads, through the cluster `analytics_access`
//!   (the server itself, as the read-only user `access_reader`: `scripts/lib.sh`
//!   `clickhouse_access_reader`), the view `analytics_access.NAME__TABLE`, which keeps the
//!   rows of the keys in `analytics_access.grants`. The analyst's profile is
//!   `readonly = 1`: no writes, DDL, settings or table functions. The user itself is a file
//!   in the server's `users.d`, which the server reads within seconds.
//!
//! Either way, `analytics_access.grants` records every grant and revocation (`list` reads
//! it), and the command waits until the server lets the analyst in (or, for a revocation,
//! no longer does).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clickhouse::Client;
use consumer::schema::ServerCaps;
use consumer::topology::{Server, Topology};
use sha2::{Digest, Sha256};

/// Grants, revokes and lists analysts' access.
#[derive(clap::Parser, Clone, Debug)]
#[command(
    version,
    about = "Gives an analyst a read-only ClickHouse user that sees only the rows of the \
             public keys granted to them.",
    long_about = "Gives an analyst a read-only ClickHouse user that sees only the rows of the \
                  public keys granted to them, in every table and view of the analysts' \
                  database that has a public_key column (events, the results views, the \
                  aggregates). On a modern server: a SQL user, grants and row policies; the \
                  analyst queries analytics.events as everyone does. On ClickHouse 18.x (no \
                  row filters): a users.d file per analyst (--users-dir) and a database \
                  analyst_NAME of their own, whose tables have the names of the analysts' \
                  database and hold only their keys' rows. Run grant again after a schema \
                  upgrade, to pick up new tables and columns.\n\n\
                  Exit codes: 0 done, 2 a name, password or key refused, 1 any other failure."
)]
pub struct AccessConfig {
    #[command(subcommand)]
    pub command: AccessCommand,

    /// ClickHouse 18.x only: the `users.d` folder of each server, in the order of
    /// CLICKHOUSE_URL, comma-separated (the analyst's user is a file there).
    #[arg(
        long = "users-dir",
        env = "CLICKHOUSE_USERS_DIRS",
        value_delimiter = ',',
        global = true
    )]
    pub users_dirs: Vec<PathBuf>,

    /// Longest wait for the servers to let the analyst in (or out), in seconds.
    #[arg(long, default_value_t = 60, global = true)]
    pub wait_secs: u64,

    #[command(flatten)]
    pub clickhouse: consumer::ClickHouseArgs,
}

#[derive(clap::Subcommand, Clone, Debug)]
pub enum AccessCommand {
    /// Creates the analyst's user, or changes its password and keys.
    Grant {
        /// The analyst's ClickHouse user name: a letter, then letters, digits and _.
        #[arg(long)]
        user: String,
        /// Their password (at least 12 characters), or ANALYST_PASSWORD.
        #[arg(long, env = "ANALYST_PASSWORD", hide_env_values = true)]
        password: String,
        /// A public key whose rows they see (pk_...); repeat it for several sites.
        #[arg(long = "key", required = true)]
        keys: Vec<String>,
    },
    /// Removes the analyst's user and everything made for it.
    Revoke {
        #[arg(long)]
        user: String,
    },
    /// Prints every analyst and their keys.
    List,
}

/// A name, password or key the command refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("refusing {what} {value:?}: {reason}")]
pub struct Refused {
    what: &'static str,
    value: String,
    reason: &'static str,
}

/// Names the analysts cannot take: the operators' and the services' users.
const RESERVED: &[&str] = &["default", "consumer", "access_reader", "readonly"];

/// The database of the grants and (18.x) of the filtering views.
const ACCESS_DB: &str = "analytics_access";

/// The role every analyst has (SQL access control): the other users' policy excludes it.
const ANALYST_ROLE: &str = "analytics_analyst";

/// A valid user name.
pub fn check_user(user: &str) -> Result<(), Refused> {
    let refuse = |reason| {
        Err(Refused {
            what: "user",
            value: user.to_owned(),
            reason,
        })
    };
    let mut bytes = user.bytes();
    if !bytes.next().is_some_and(|b| b.is_ascii_alphabetic()) {
        return refuse("it must start with a letter");
    }
    if user.len() > 48 || !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return refuse("it must be at most 48 letters, digits and _");
    }
    if user.contains("__") {
        return refuse("it must not hold __ (the separator of the access views' names)");
    }
    if RESERVED.contains(&user.to_ascii_lowercase().as_str()) {
        return refuse("it is a service's or the operators' user");
    }
    Ok(())
}

/// A valid password.
pub fn check_password(password: &str) -> Result<(), Refused> {
    let refuse = |reason| {
        Err(Refused {
            what: "password",
            value: "(hidden)".to_owned(),
            reason,
        })
    };
    if password.chars().count() < 12 {
        return refuse("it must be at least 12 characters");
    }
    if password.chars().any(char::is_control) {
        return refuse("it holds control characters");
    }
    Ok(())
}

/// A valid public key: `pk_` then letters, digits, `_`, `-` and `.`, as the snapshots have
/// them (nothing that would need quoting in SQL).
pub fn check_key(key: &str) -> Result<(), Refused> {
    let ok = key.len() > 3
        && key.len() <= 128
        && key.starts_with("pk_")
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Refused {
            what: "key",
            value: key.to_owned(),
            reason: "a public key is pk_ followed by letters, digits, _, - or .",
        })
    }
}

/// Checks the command line before anything is sent.
pub fn check(command: &AccessCommand) -> Result<(), Refused> {
    match command {
        AccessCommand::Grant {
            user,
            password,
            keys,
        } => {
            check_user(user)?;
            check_password(password)?;
            keys.iter().try_for_each(|key| check_key(key))
        }
        AccessCommand::Revoke { user } => check_user(user),
        AccessCommand::List => Ok(()),
    }
}

fn sha256_hex(password: &str) -> String {
    Sha256::digest(password.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn key_list(keys: &[String]) -> String {
    keys.iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The statements that make the grants table.
fn grants_table() -> [String; 2] {
    [
        format!("CREATE DATABASE IF NOT EXISTS {ACCESS_DB}"),
        format!(
            "CREATE TABLE IF NOT EXISTS {ACCESS_DB}.grants (user String, keys Array(String), \
             revoked UInt8, version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY user"
        ),
    ]
}

/// The tables (and views) an analyst reads: those of `database` with a `public_key`
/// column; in a cluster, the Distributed ones rather than the shards' parts.
fn readable(columns: &[(String, String)], local: &str) -> Vec<String> {
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
) -> Vec<String> {
    let hash = sha256_hex(password);
    let mut sql = vec![
        format!("CREATE ROLE IF NOT EXISTS {ANALYST_ROLE}"),
        format!(
            "CREATE USER IF NOT EXISTS {user} IDENTIFIED WITH sha256_hash BY '{hash}' \
             SETTINGS readonly = 1"
        ),
        format!("ALTER USER {user} IDENTIFIED WITH sha256_hash BY '{hash}'"),
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
    let mut sql = vec![format!("DROP USER IF EXISTS {user}")];
    for table in tables {
        sql.push(format!(
            "DROP ROW POLICY IF EXISTS {user} ON {database}.{table}"
        ));
    }
    sql
}

/// 18.x: the analyst's database, and for each table the view that keeps their keys'
/// rows and the Distributed table that reads it as `access_reader`. Made again on each
/// grant, so that a new column or table reaches the analyst. `GLOBAL IN`: in a cluster the
/// keys are read once, on the server the analyst asked, not on each shard.
fn legacy_grant(database: &str, tables: &[String], user: &str, existing: &[String]) -> Vec<String> {
    let own = format!("analyst_{user}");
    let mut sql = vec![format!("CREATE DATABASE IF NOT EXISTS {own}")];
    for table in existing.iter().filter(|t| !tables.contains(t)) {
        sql.push(format!("DROP TABLE IF EXISTS {own}.{table}"));
        sql.push(format!("DROP TABLE IF EXISTS {ACCESS_DB}.{user}__{table}"));
    }
    for table in tables {
        let view = format!("{user}__{table}");
        sql.extend([
            format!("DROP TABLE IF EXISTS {own}.{table}"),
            format!("DROP TABLE IF EXISTS {ACCESS_DB}.{view}"),
            format!(
                "CREATE VIEW {ACCESS_DB}.{view} AS SELECT * FROM {database}.{table} \
                 WHERE public_key GLOBAL IN (SELECT arrayJoin(keys) FROM {ACCESS_DB}.grants FINAL \
                 WHERE user = '{user}' AND revoked = 0)"
            ),
            format!(
                "CREATE TABLE {own}.{table} AS {ACCESS_DB}.{view} \
                 ENGINE = Distributed({ACCESS_DB}, {ACCESS_DB}, {view})"
            ),
        ]);
    }
    sql
}

fn legacy_revoke(user: &str, views: &[String]) -> Vec<String> {
    let mut sql = vec![format!("DROP DATABASE IF EXISTS analyst_{user}")];
    for view in views {
        sql.push(format!("DROP TABLE IF EXISTS {ACCESS_DB}.{view}"));
    }
    sql
}

/// 18.x: the analyst's users.d file.
fn legacy_user_file(user: &str, password: &str) -> String {
    format!(
        "<?xml version=\"1.0\"?>\n<!-- analytics-access grant: do not edit -->\n\
         <yandex><users><{user}>\n  <password_sha256_hex>{}</password_sha256_hex>\n  \
         <networks><ip>::/0</ip></networks>\n  \
         <profile>analytics_analyst</profile><quota>default</quota>\n  \
         <allow_databases><database>analyst_{user}</database></allow_databases>\n\
         </{user}></users></yandex>\n",
        sha256_hex(password)
    )
}

fn user_file(dir: &Path, user: &str) -> PathBuf {
    dir.join(format!("analyst-{user}.xml"))
}

/// Writes `contents` to `path` whole or not at all, readable by the server only.
fn write_atomically(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension("xml.new");
    std::fs::write(&tmp, contents).with_context(|| format!("cannot write {}", tmp.display()))?;
    // The server (its own user) must read it: give it the folder's owner.
    let folder = std::fs::metadata(path.parent().unwrap_or(Path::new(".")))?;
    std::os::unix::fs::chown(
        &tmp,
        Some(std::os::unix::fs::MetadataExt::uid(&folder)),
        Some(std::os::unix::fs::MetadataExt::gid(&folder)),
    )
    .ok();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o640))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

async fn run_all(server: &Server, statements: &[String]) -> anyhow::Result<()> {
    for sql in statements {
        server
            .client
            .query(sql)
            .execute()
            .await
            .with_context(|| format!("{}: {sql}", server.url))?;
    }
    Ok(())
}

async fn record(server: &Server, user: &str, keys: &[String], revoked: bool) -> anyhow::Result<()> {
    let version = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_micros() as u64;
    let sql = format!(
        "INSERT INTO {ACCESS_DB}.grants (user, keys, revoked, version) \
         VALUES ('{user}', [{}], {}, {version})",
        key_list(keys),
        u8::from(revoked)
    );
    run_all(server, &[sql]).await
}

/// Whether `user` logs in with `password` on `server` and reads `table` (or why not).
async fn lets_in(server: &Server, user: &str, password: &str, table: &str) -> Result<(), String> {
    Client::default()
        .with_url(&server.url)
        .with_user(user)
        .with_password(password)
        .with_validation(false)
        .query(&format!("SELECT count() FROM {table}"))
        .fetch_one::<u64>()
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Waits until `user` is let in (`wanted`) or no longer is.
async fn wait_for(
    server: &Server,
    user: &str,
    password: &str,
    table: &str,
    wanted: bool,
    deadline: Instant,
) -> anyhow::Result<()> {
    loop {
        let answer = lets_in(server, user, password, table).await;
        if answer.is_ok() == wanted {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{}: the server still {} {user} after the wait (does it read the users folder?): {}",
            server.url,
            if wanted { "refuses" } else { "lets in" },
            answer.err().unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// 18.x: waits until the server no longer knows `user` (its users.d file read again).
async fn wait_gone(server: &Server, user: &str, deadline: Instant) -> anyhow::Result<()> {
    loop {
        let answer = lets_in(server, user, "", "system.one").await;
        if answer.as_ref().is_err_and(|e| e.contains("Unknown user")) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{}: the server still knows {user} after the wait (does it read the users \
             folder?): {answer:?}",
            server.url
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One analyst with access and their keys.
#[derive(clickhouse::Row, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub user: String,
    pub keys: Vec<String>,
}

/// Carries out the command.
pub async fn run(config: &AccessConfig) -> anyhow::Result<String> {
    let topology = Topology::from_args(&config.clickhouse)?;
    let database = &config.clickhouse.clickhouse_database;
    anyhow::ensure!(
        !database.is_empty()
            && database
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
        "database name {database:?} must be letters, digits and _ only"
    );
    let servers: Vec<&Server> = topology.servers().collect();
    let deadline = Instant::now() + Duration::from_secs(config.wait_secs);
    if let AccessCommand::List = config.command {
        let grants = list(servers[0]).await?;
        let mut out = String::new();
        for grant in &grants {
            out.push_str(&format!("{}\t{}\n", grant.user, grant.keys.join(",")));
        }
        if grants.is_empty() {
            out.push_str("No analyst has access.\n");
        }
        return Ok(out);
    }
    let caps = ServerCaps::of(&servers[0].client).await?;
    let legacy = !caps.has_sql_access();
    if legacy {
        anyhow::ensure!(
            config.users_dirs.len() == servers.len(),
            "ClickHouse {} has no SQL users: give --users-dir (CLICKHOUSE_USERS_DIRS) once per \
             server of CLICKHOUSE_URL ({} given, {} servers)",
            caps.major,
            config.users_dirs.len(),
            servers.len()
        );
    }
    let mut done = Vec::new();
    for (index, server) in servers.iter().enumerate() {
        let columns: Vec<(String, String)> = server
            .client
            .query("SELECT table, name FROM system.columns WHERE database = ?")
            .bind(database.as_str())
            .fetch_all()
            .await
            .with_context(|| format!("cannot read the tables of {database} on {}", server.url))?;
        let tables = readable(&columns, topology.local());
        anyhow::ensure!(
            tables.iter().any(|t| t == "events"),
            "{}: {database} has no events table with public_key (has the consumer migrated it?)",
            server.url
        );
        run_all(server, &grants_table()).await?;
        match &config.command {
            AccessCommand::Grant {
                user,
                password,
                keys,
            } => {
                record(server, user, keys, false).await?;
                if legacy {
                    let reader: u64 = server
                        .client
                        .query("SELECT count() FROM system.clusters WHERE cluster = ?")
                        .bind(ACCESS_DB)
                        .fetch_one()
                        .await?;
                    anyhow::ensure!(
                        reader > 0,
                        "{}: no cluster {ACCESS_DB} in the server's configuration: it is made \
                         with the user access_reader by scripts/lib.sh clickhouse_access_reader",
                        server.url
                    );
                    let existing: Vec<String> = server
                        .client
                        .query("SELECT name FROM system.tables WHERE database = ?")
                        .bind(format!("analyst_{user}"))
                        .fetch_all()
                        .await?;
                    run_all(server, &legacy_grant(database, &tables, user, &existing)).await?;
                    write_atomically(
                        &user_file(&config.users_dirs[index], user),
                        &legacy_user_file(user, password),
                    )?;
                    let own = format!("analyst_{user}.events");
                    wait_for(server, user, password, &own, true, deadline).await?;
                } else {
                    run_all(server, &sql_grant(database, &tables, user, password, keys)).await?;
                    let events = format!("{database}.events");
                    wait_for(server, user, password, &events, true, deadline).await?;
                }
                done.push(format!("{}: {user} reads {}", server.url, keys.join(", ")));
            }
            AccessCommand::Revoke { user } => {
                record(server, user, &[], true).await?;
                if legacy {
                    let views: Vec<String> = server
                        .client
                        .query("SELECT name FROM system.tables WHERE database = ? AND startsWith(name, ?)")
                        .bind(ACCESS_DB)
                        .bind(format!("{user}__"))
                        .fetch_all()
                        .await?;
                    let file = user_file(&config.users_dirs[index], user);
                    match std::fs::remove_file(&file) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => {
                            return Err(e)
                                .with_context(|| format!("cannot remove {}", file.display()));
                        }
                    }
                    run_all(server, &legacy_revoke(user, &views)).await?;
                    wait_gone(server, user, deadline).await?;
                } else {
                    run_all(server, &sql_revoke(database, &tables, user)).await?;
                }
                done.push(format!("{}: {user} has no access", server.url));
            }
            AccessCommand::List => unreachable!("answered above"),
        }
    }
    Ok(done.join("\n") + "\n")
}

/// Every analyst with access, and their keys.
pub async fn list(server: &Server) -> anyhow::Result<Vec<Grant>> {
    let exists: u64 = server
        .client
        .query("SELECT count() FROM system.tables WHERE database = ? AND name = 'grants'")
        .bind(ACCESS_DB)
        .fetch_one()
        .await?;
    if exists == 0 {
        return Ok(Vec::new());
    }
    Ok(server
        .client
        .query(&format!(
            "SELECT user, keys FROM {ACCESS_DB}.grants FINAL WHERE revoked = 0 ORDER BY user"
        ))
        .fetch_all()
        .await?)
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
    ));
    sql.extend(sql_revoke(database, tables, "alice"));
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_passwords_and_keys_are_checked() {
        for bad in [
            "",
            "1a",
            "a-b",
            "a b",
            "a__b",
            "default",
            "Consumer",
            "access_reader",
        ] {
            assert!(check_user(bad).is_err(), "{bad:?}");
        }
        assert!(check_user(&"a".repeat(49)).is_err());
        for good in ["alice", "Bob_2", "a"] {
            assert_eq!(check_user(good), Ok(()));
        }
        assert!(check_password("short").is_err());
        assert!(check_password("twelve chars\n").is_err());
        assert_eq!(check_password("twelve chars"), Ok(()));
        for bad in ["pk_", "pk_a'b", "pk_a b", "key_a", "pk_a%", "pk_\u{0}"] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
        assert_eq!(check_key("pk_demo-1.x_Y"), Ok(()));
    }

    #[test]
    fn the_tables_read_are_those_with_a_public_key() {
        let columns: Vec<(String, String)> = [
            ("events", "public_key"),
            ("events", "visitor_id"),
            ("events_local", "public_key"),
            ("schema_migrations", "version"),
            (".inner.x", "public_key"),
            ("experiment_results", "public_key"),
        ]
        .iter()
        .map(|(t, c)| ((*t).to_owned(), (*c).to_owned()))
        .collect();
        assert_eq!(
            readable(&columns, "_local"),
            ["events", "experiment_results"]
        );
        assert_eq!(
            readable(&columns, ""),
            ["events", "events_local", "experiment_results"]
        );
    }

    #[test]
    fn the_password_is_sent_and_stored_as_its_hash() {
        let hash = sha256_hex("a password of 12");
        assert_eq!(hash.len(), 64);
        let sql = sql_grant(
            "analytics",
            &["events".into()],
            "alice",
            "a password of 12",
            &[],
        );
        assert!(sql.iter().all(|s| !s.contains("a password of 12")));
        assert!(sql.iter().any(|s| s.contains(&hash)));
        let file = legacy_user_file("alice", "a password of 12");
        assert!(!file.contains("a password of 12") && file.contains(&hash));
    }
}

//! The `analytics-access` command: read-only ClickHouse users for analysts, each seeing the
//! rows of the public keys granted to them and nothing else, within caps on time, memory,
//! concurrency and result size.
//!
//! Two mechanisms (`modern.rs`, `legacy.rs`), chosen per server by
//! [`ServerCaps::has_sql_access`] as the migrations choose theirs:
//! - **SQL access control** (modern servers): a user with `readonly = 1` and the caps as
//!   its settings, an hourly quota, `SELECT` on each table and view of the analysts'
//!   database that has a `public_key` column, and a row policy on each that keeps the
//!   granted keys. Other users keep every row through a permissive policy for all but the
//!   role `analytics_analyst`.
//! - **18.x** has no grants and ignores users.xml row filters, and anything that reads on
//!   the analyst's behalf with more rights (a Distributed table read as another user) runs
//!   the analyst's subqueries with those rights. So the analyst reads plain tables and
//!   views of their own and nothing else: a database `analyst_NAME` (`allow_databases`),
//!   a copy of the analysts' schema ([`schema::migrate_copy`]: replicated whole
//!   to every server of a cluster), filled with their keys' rows by materialized views on
//!   each server (the feeds, in `analytics_access`, which no analyst reads) and, at grant,
//!   with the rows already stored. Its views run with the analyst's own rights. The user,
//!   their profile (`readonly = 1` and the caps) and their quota are a file in the
//!   server's `users.d`, which the server reads within seconds. A grant makes the copy
//!   anew; a revocation drops it.
//!
//! Either way, `analytics_access.grants` records every grant and revocation (`list` reads
//! it), and the command waits until the server lets the analyst in (or, for a revocation,
//! no longer does).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clickhouse_kit::topology::{Server, Topology};
use schema::ServerCaps;
use schema::table_lock::{self, TableLock};

mod common;
mod legacy;
mod modern;

use common::{ACCESS_DB, grants_table, key_list, lets_in, run_all};
pub use common::{Caps, Refused, default_caps};

use legacy::{
    copy_of, legacy_drop, legacy_grant, legacy_user_file, user_file, wait_gone, write_atomically,
};
use modern::readable;
pub use modern::{modern_statements, sql_grant, sql_revoke};

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
    pub clickhouse: clickhouse_kit::ClickHouseArgs,
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
        /// Where the analyst may connect from: the analytics gate's source address (the
        /// default is `analytics-gate`'s own), an IP or a CIDR block; repeat it for
        /// several. Anything wider lets the analyst past the gate's bounds.
        #[arg(
            long = "network",
            env = "ANALYSTS_NETWORK",
            value_delimiter = ',',
            default_value = GATE_SOURCE_ADDRESS
        )]
        networks: Vec<String>,
        #[command(flatten)]
        caps: Caps,
    },
    /// Removes the analyst's user and everything made for it.
    Revoke {
        #[arg(long)]
        user: String,
    },
    /// Prints every analyst and their keys.
    List,
}

/// Names the analysts cannot take: the operators' and the services' users.
const RESERVED: &[&str] = &[
    "default",
    "consumer",
    "access_reader",
    "readonly",
    "operator",
];

/// The address `analytics-gate` connects from unless told otherwise, and so where grants
/// let analysts in from: on loopback, and not the `127.0.0.1` that the operators'
/// passwordless `default` accepts.
pub const GATE_SOURCE_ADDRESS: &str = "127.0.0.2";

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

/// A valid network: an IP address, or one with a prefix length (`10.0.0.0/8`).
pub fn check_network(network: &str) -> Result<(), Refused> {
    let (address, prefix) = match network.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (network, None),
    };
    let width = match address.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => 32,
        Ok(std::net::IpAddr::V6(_)) => 128,
        Err(_) => 0,
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_digit())
            && p.parse().is_ok_and(|p: u32| p <= width)
    });
    if width > 0 && prefix_ok {
        Ok(())
    } else {
        Err(Refused {
            what: "network",
            value: network.to_owned(),
            reason: "a network is an IP address, or one followed by /prefix-length",
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
            networks,
            caps,
        } => {
            check_user(user)?;
            check_password(password)?;
            caps.check()?;
            networks.iter().try_for_each(|n| check_network(n))?;
            keys.iter().try_for_each(|key| check_key(key))
        }
        AccessCommand::Revoke { user } => check_user(user),
        AccessCommand::List => Ok(()),
    }
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

/// What 18.x answers a user who logs in from an address outside their `networks`: the
/// server has read their file, but this command is not where they connect from (the
/// analytics gate is).
const NOT_FROM_HERE: &str = "is not allowed to connect from address";

/// Waits until `user` is let in (`wanted`), or known but not from this address, or no
/// longer is.
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
        let known = answer.as_ref().is_err_and(|e| e.contains(NOT_FROM_HERE));
        if (answer.is_ok() || known) == wanted {
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
    // The tables an analyst reads, as every server has them.
    let mut tables = Vec::new();
    for server in &servers {
        let columns: Vec<(String, String)> = server
            .client
            .query("SELECT table, name FROM system.columns WHERE database = ?")
            .bind(database.as_str())
            .fetch_all()
            .await
            .with_context(|| format!("cannot read the tables of {database} on {}", server.url))?;
        let readable = readable(&columns, topology.local());
        anyhow::ensure!(
            readable.iter().any(|t| t == "events"),
            "{}: {database} has no events table with public_key (has the consumer migrated it?)",
            server.url
        );
        run_all(server, &grants_table()).await?;
        tables.push(readable);
    }
    let mut done = Vec::new();
    match &config.command {
        AccessCommand::Grant {
            user,
            password,
            keys,
            networks,
            caps: limits,
        } => {
            for server in &servers {
                record(server, user, keys, false).await?;
            }
            if legacy {
                // Never beside an erasure, which could miss the copy or the rows its
                // backfill read before the erasure deleted them.
                let work = legacy_grant(&topology, caps, database, user, keys);
                TableLock::holding(&topology, caps, database, table_lock::ACCESS, work).await?;
            }
            for ((index, server), tables) in servers.iter().enumerate().zip(&tables) {
                let table = if legacy {
                    write_atomically(
                        &user_file(&config.users_dirs[index], user),
                        &legacy_user_file(user, password, networks, limits),
                    )?;
                    format!("{}.events", copy_of(user))
                } else {
                    let sql = sql_grant(database, tables, user, password, keys, networks, limits);
                    run_all(server, &sql).await?;
                    format!("{database}.events")
                };
                wait_for(server, user, password, &table, true, deadline).await?;
                done.push(format!("{}: {user} reads {}", server.url, keys.join(", ")));
            }
        }
        AccessCommand::Revoke { user } => {
            for ((index, server), tables) in servers.iter().enumerate().zip(&tables) {
                record(server, user, &[], true).await?;
                if legacy {
                    let file = user_file(&config.users_dirs[index], user);
                    match std::fs::remove_file(&file) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => {
                            return Err(e)
                                .with_context(|| format!("cannot remove {}", file.display()));
                        }
                    }
                } else {
                    run_all(server, &sql_revoke(database, tables, user)).await?;
                }
            }
            if legacy {
                // The data first: a connection that outlives the user finds nothing.
                let work = legacy_drop(&topology, user);
                TableLock::holding(&topology, caps, database, table_lock::ACCESS, work).await?;
                for server in &servers {
                    wait_gone(server, user, deadline).await?;
                }
            }
            for server in &servers {
                done.push(format!("{}: {user} has no access", server.url));
            }
        }
        AccessCommand::List => unreachable!("answered above"),
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

#[cfg(test)]
mod tests {
    use super::common::sha256_hex;
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
        for bad in [
            "",
            "localhost",
            "10.0.0.0/33",
            "::/129",
            "1.2.3.4/",
            "1.2.3.4/+8",
            "'",
        ] {
            assert!(check_network(bad).is_err(), "{bad:?}");
        }
        for good in ["127.0.0.2", "10.0.0.0/8", "::/0", "fd00::1/128"] {
            assert_eq!(check_network(good), Ok(()));
        }
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
            &[],
            &default_caps(),
        );
        assert!(sql.iter().all(|s| !s.contains("a password of 12")));
        assert!(sql.iter().any(|s| s.contains(&hash)));
        let file = legacy_user_file("alice", "a password of 12", &[], &default_caps());
        assert!(!file.contains("a password of 12") && file.contains(&hash));
    }
}

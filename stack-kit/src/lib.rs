//! The local stack's processes, each started in the background and recorded by a pid
//! file, the way `scripts/up` runs them: ClickHouse (one server, or the cluster of two
//! shards of two replicas with its ZooKeeper), the Tansu broker, the three services and
//! the nginx front. `scripts/up`, `scripts/down` and `scripts/test` call the `stack`
//! binary; the tests and the bench and chaos drivers call this library, so that how a
//! server is started is written once. Installing what the stack needs stays in
//! `scripts/lib.sh`.
//!
//! Every wait is bounded, and a process that exits while it is awaited ends the wait with
//! the end of its log. Progress goes to stderr as `==> …` lines, as the scripts print it.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod clickhouse;
pub mod front;
pub mod process;
pub mod tansu;
pub mod up;

/// A progress line on stderr, as the scripts print theirs.
pub fn log(line: &str) {
    eprintln!("==> {line}");
}

/// The SHA-256 of `bytes` in hexadecimal, as sha256sum(1) prints it.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(bytes))
}

/// Lower-case hexadecimal.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

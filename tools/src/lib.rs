//! The operators' commands, apart from the services so that the services do not link
//! what only they need (statrs): `experiment-results` prints one experiment's results
//! ([`results`]) and writes them as a page ([`report`]), `dlq-replay` publishes dead
//! letters again after their cause was fixed ([`replay`]), `analytics-erase` erases a
//! visitor's or a session's rows ([`erase`]), `analytics-access` gives analysts read-only
//! users that see their sites' rows only ([`access`]), and `analytics-gate` is the analysts' way in
//! to the server ([`gate`]). Each takes the same settings, under the same
//! names, as the service whose data it reads.

pub mod access;
pub mod erase;
pub mod gate;
pub mod metrics;
pub mod plan;
mod replay;
pub mod report;
pub mod results;
pub mod stats;

pub use replay::{ReplayConfig, replay};

//! What every ClickHouse client of the pipeline shares, below the schema: [`topology`],
//! the servers (one, or a cluster's shards of replicas), the flags that name them and the
//! shard of a visitor; [`backoff`], the capped, jittered waits between retries (of an
//! insert, a migration's lock, a dead letter's delivery).

pub mod backoff;
pub mod topology;

pub use topology::ClickHouseArgs;

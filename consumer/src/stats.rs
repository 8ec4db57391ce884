//! The counts of one consumer, kept by the stage that does the counted thing, for tests and
//! diagnostics: metrics are process-wide, these are per [`crate::Application`].

use std::sync::atomic::AtomicU64;

/// Counts of one consumer, for tests and diagnostics (metrics are process-wide).
#[derive(Debug, Default)]
pub struct Stats {
    /// Inserts ClickHouse took, and their rows.
    pub inserts: AtomicU64,
    pub rows_inserted: AtomicU64,
    pub dead_letters: AtomicU64,
    /// Batches made: a consumer needs two (one filled while the other is stored), whose
    /// buffers it then uses again.
    pub batches_made: AtomicU64,
    /// Messages taken into batches, counted when a batch's collecting ends.
    pub messages_read: AtomicU64,
}

//! Storing a batch: its rows inserted into ClickHouse, the rows ClickHouse refuses found
//! by halving and set aside with the batch's other dead letters, then its offsets handed
//! back to be committed. A batch is stored whole or not at all: its offsets come back only
//! once every row is inserted and every dead letter acknowledged.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rdkafka::TopicPartitionList;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::batch::{Batch, Letter};
use crate::dead_letters::DeadLetters;
use crate::refresh::Waiting;
use crate::sink::{Outcome, Sink};
use crate::stats::Stats;

/// A batch being stored by its task; `None` when shutdown came first.
pub(crate) type Storing = JoinHandle<Option<Stored>>;

/// A stored batch: the offsets to commit, and the batch emptied, to be filled again.
pub(crate) struct Stored {
    pub offsets: TopicPartitionList,
    pub spare: Batch,
}

/// What stores a batch, shared with the tasks that do it.
pub(crate) struct Store {
    pub sink: Sink,
    pub dead_letters: DeadLetters,
    pub stats: Arc<Stats>,
    /// Where the visitors of inserted rows wait for their metric values' refresh, when
    /// one runs.
    pub refresh: Option<Arc<Waiting>>,
}

impl Store {
    /// Stores `batch` in a task of its own.
    pub(crate) fn spawn(self: &Arc<Self>, batch: Batch, stop: watch::Receiver<bool>) -> Storing {
        tokio::spawn(self.clone().store(batch, stop))
    }

    /// Rows, then dead letters; `None` if shutdown came first.
    async fn store(
        self: Arc<Self>,
        mut batch: Batch,
        mut stop: watch::Receiver<bool>,
    ) -> Option<Stored> {
        let stop = &mut stop;
        let mut dead: Vec<(Letter<'_>, String)> = batch.dead_letters();
        // Refused rows are found by halving: a refused single row is set aside.
        let mut pending = Vec::new();
        pending.push(0..batch.rows().len());
        while let Some(range) = pending.pop() {
            match self
                .sink
                .insert(&batch.rows()[range.clone()], batch.kept(), stop)
                .await
            {
                Outcome::Inserted => {
                    if let Some(waiting) = &self.refresh {
                        let text = |span: &std::ops::Range<usize>| {
                            std::str::from_utf8(&batch.kept()[span.clone()]).unwrap_or_default()
                        };
                        waiting.add(
                            batch.rows()[range.clone()]
                                .iter()
                                .map(|row| (text(&row.public_key), text(&row.visitor_id))),
                        );
                    }
                    self.stats.inserts.fetch_add(1, Ordering::Relaxed);
                    self.stats
                        .rows_inserted
                        .fetch_add(range.len() as u64, Ordering::Relaxed);
                }
                Outcome::Stopped => return None,
                Outcome::Rejected(reason) if range.len() == 1 => {
                    let reason = format!("refused by ClickHouse: {reason}");
                    dead.push((batch.letter_of_row(range.start), reason));
                }
                Outcome::Rejected(_) => {
                    let middle = range.start + range.len() / 2;
                    pending.push(middle..range.end);
                    pending.push(range.start..middle);
                }
            }
        }
        if !self.dead_letters.publish(&dead, stop).await {
            return None;
        }
        let offsets = batch.offsets();
        batch.clear();
        Some(Stored {
            offsets,
            spare: batch,
        })
    }
}

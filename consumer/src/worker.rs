//! The worker: the consume loop. It collects a batch (max rows, bytes or wait) and hands
//! it to a task of its own to be stored while the next one is collected and decoded; the
//! next is handed over only once the one before is stored and committed, so commits keep
//! the order of the messages and at most two batches are held. While an insert is being
//! retried nothing more is read once the next batch is full, so memory stays bounded.
//! Between batches it looks at the group, and rejoins it when the group has stalled.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http_kit::ops::{Dependency, Readiness};
use rdkafka::consumer::{CommitMode, Consumer};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::batch::Batch;
use crate::config::Config;
use crate::liveness::{StallDetector, Verdict};
use crate::shutdown::stopped;
use crate::source::{Source, look_every};
use crate::store::{Store, Stored, Storing};

/// Why the collecting of a batch ended.
enum Next {
    Flush,
    Look,
    Stop,
}

/// The consuming half, apart from the HTTP listener.
pub(crate) struct Worker {
    pub readiness: Readiness,
    /// Not ready while the group is stalled (see [`crate::liveness`]).
    pub group: Dependency,
    pub source: Source,
    pub store: Arc<Store>,
    pub config: Config,
}

impl Worker {
    pub(crate) async fn consume(mut self, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
        self.readiness.set(true);
        let max_wait = Duration::from_millis(self.config.batch_max_wait_ms);
        let session_timeout = Duration::from_millis(self.config.kafka_session_timeout_ms);
        // Three quarters of a session timeout: a stall is reported before the dead
        // member's session ends; the rejoin waits until librdkafka has settled in the
        // group (see crate::liveness and docs/operating.md, "The consumer: delivery guarantees").
        let mut detector = StallDetector::new(session_timeout * 3 / 4);
        let mut look = tokio::time::interval(look_every(session_timeout));
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut storing: Option<Storing> = None;
        // Batches whose buffers wait to be used again.
        let mut spares: Vec<Batch> = Vec::new();
        let clean = loop {
            let mut batch = spares.pop().unwrap_or_else(|| {
                self.store
                    .stats
                    .batches_made
                    .fetch_add(1, Ordering::Relaxed);
                Batch::new(self.config.batch_max_rows, self.config.batch_max_bytes)
            });
            let mut deadline: Option<Instant> = None;
            // `None` when the batch before was not stored (shutdown came first, or its
            // task failed): nothing after it may be committed.
            let next: Option<Next> = loop {
                let wait = async {
                    match deadline {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    () = stopped(&mut stop) => break Some(Next::Stop),
                    stored = async { storing.as_mut().expect("guarded").await }, if storing.is_some() => {
                        storing = None;
                        if !self.commit(stored, &stop, &mut spares) {
                            break None;
                        }
                    }
                    // A batch whose wait is over while the one before is still being
                    // stored could not be stored sooner: it keeps taking rows until then.
                    () = wait, if storing.is_none() => break Some(Next::Flush),
                    _ = look.tick(), if batch.is_empty() => break Some(Next::Look),
                    received = self.source.consumer.recv() => match received {
                        Ok(message) => {
                            batch.add(&message);
                            deadline.get_or_insert_with(|| Instant::now() + max_wait);
                            if batch.is_full() {
                                break Some(Next::Flush);
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "Kafka consume error.");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    },
                }
            };
            self.store
                .stats
                .messages_read
                .fetch_add(batch.messages() as u64, Ordering::Relaxed);
            let Some(next) = next else {
                break false;
            };
            if batch.is_empty() {
                // Nothing to hand over: the batch being stored, if any, goes on (a look
                // must not hold the reading of the next batch behind an insert).
                spares.push(batch);
            } else {
                // One batch stored at a time: the one before must be committed first.
                if !self.finish_storing(&mut storing, &stop, &mut spares).await {
                    break false;
                }
                storing = Some(self.store.spawn(batch, stop.clone()));
            }
            match next {
                Next::Stop => break self.finish_storing(&mut storing, &stop, &mut spares).await,
                Next::Look => {
                    if self.look_at_group(&mut detector).await {
                        // The batch being stored is committed by this client before it
                        // leaves the group.
                        if !self.finish_storing(&mut storing, &stop, &mut spares).await {
                            break false;
                        }
                        self.rejoin_group(&mut detector).await;
                    }
                }
                Next::Flush => {}
            }
        };

        self.readiness.set(false);
        self.source.consumer.unsubscribe();
        if clean {
            tracing::info!("Consumer stopped cleanly.");
            Ok(())
        } else {
            anyhow::bail!("stopped with a batch not stored; it will be consumed again")
        }
    }

    /// Publishes this consumer's share of the partitions and, while it owns none, asks
    /// the broker whether work waits that nobody consumes; reports the stall. Returns
    /// whether to rejoin: stalled, and the broker is not still rebalancing the group.
    async fn look_at_group(&mut self, detector: &mut StallDetector) -> bool {
        self.source.probe.drain_events();
        let own = self.source.consumer.assignment().map_or(0, |a| a.count());
        metrics::gauge!("consumer_assigned_partitions").set(own as f64);
        let group = if own > 0 {
            Vec::new()
        } else {
            let probe = self.source.probe.clone();
            match tokio::task::spawn_blocking(move || probe.look()).await {
                Ok(Ok(group)) => group,
                // An unreachable broker is no evidence either way.
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "Cannot look at the consumer group.");
                    return false;
                }
                Err(_) => return false,
            }
        };
        let settled = self.source.membership.settled();
        let verdict = detector.observe(Instant::now(), own, settled, &group);
        tracing::debug!(
            own,
            settled,
            ?group,
            ?verdict,
            "Looked at the consumer group."
        );
        match verdict {
            Verdict::Healthy => {
                self.group.pass();
                metrics::gauge!("consumer_group_stalled").set(0.0);
                false
            }
            Verdict::Suspect => false,
            Verdict::Rebalancing => {
                self.group.fail(
                    "This consumer owns no partitions while events wait: the broker is rebalancing the group.",
                );
                metrics::gauge!("consumer_group_stalled").set(1.0);
                tracing::warn!(?group, group_id = %self.config.group_id,
                    "This consumer owns no partitions while work waits that nobody consumes, and the broker has not finished rebalancing the group; waiting for it to end (a broker that never does needs a restart).");
                false
            }
            Verdict::Stalled => {
                self.group.fail(
                    "This consumer owns no partitions while events wait that nobody consumes; it rejoins the group.",
                );
                metrics::gauge!("consumer_group_stalled").set(1.0);
                tracing::warn!(?group, group_id = %self.config.group_id,
                    "This consumer owns no partitions while work waits that nobody consumes; rejoining the group.");
                true
            }
        }
    }

    /// Rejoins after a stall, counting it; a new stall is then timed from now.
    async fn rejoin_group(&mut self, detector: &mut StallDetector) {
        match self.source.rejoin().await {
            Ok(()) => {
                metrics::counter!("consumer_group_rejoins_total").increment(1);
                detector.reset();
            }
            Err(e) => tracing::error!(error = %format!("{e:#}"), "Cannot rejoin the group."),
        }
    }

    /// Waits for the batch being stored, if any, and commits it. Returns `false` when it
    /// was not stored.
    async fn finish_storing(
        &self,
        storing: &mut Option<Storing>,
        stop: &watch::Receiver<bool>,
        spares: &mut Vec<Batch>,
    ) -> bool {
        match storing.take() {
            Some(task) => self.commit(task.await, stop, spares),
            None => true,
        }
    }

    /// Commits what a batch's task stored and keeps its buffers in `spares`. Returns
    /// `false` when it was not stored.
    fn commit(
        &self,
        stored: Result<Option<Stored>, tokio::task::JoinError>,
        stop: &watch::Receiver<bool>,
        spares: &mut Vec<Batch>,
    ) -> bool {
        let offsets = match stored {
            Ok(Some(stored)) => {
                spares.push(stored.spare);
                stored.offsets
            }
            Ok(None) => return false,
            Err(e) => {
                tracing::error!(error = %e, "The task storing a batch failed.");
                return false;
            }
        };
        // A failed commit (say, after a rebalance) only means redelivery, which the
        // ReplacingMergeTree collapses.
        let mode = if *stop.borrow() {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        if let Err(e) = self.source.consumer.commit(&offsets, mode) {
            tracing::warn!(error = %e, "Offset commit failed; the batch may be read again.");
        }
        true
    }
}

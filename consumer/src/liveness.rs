//! Group liveness. A consumer that owns no partitions while a partition of its topic holds
//! uncommitted work that nobody consumes is stalled: nothing will ever store that work.
//! Tansu's coordinator leaves a group in that state when a member dies and a new one joins
//! before the dead one's session expired (an empty assignment, and no rebalance after it).
//! The worker looks at the group every few seconds while it owns nothing; once the stall
//! has lasted three quarters of a session timeout it leaves the group and joins again with
//! a fresh client.
//!
//! It leaves only once librdkafka has settled in the group (joined, and holding what the
//! broker assigned it: nothing). While a rebalance is still under way the broker finishes
//! it by itself (Tansu expires the dead members after their session timeout, and the
//! member that joins next leads), and leaving then is harmful: Tansu 0.6 keeps a leader
//! that leaves before its SyncGroup as the group's leader forever, so that no member
//! ever gets an assignment again (`LeaveGroup` in the forming state does not clear it).
//!
//! "Nobody consumes" is decided from two facts, so that extra idle consumers (more members
//! than partitions) never rejoin while a busy member merely waits for ClickHouse:
//! - the broker names no member as the partition's owner (DescribeGroups; Apache Kafka
//!   reports member assignments, Tansu reports none, so there this fact always holds);
//! - the partition's committed offset has not moved during the whole stall bound.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::statistics::ConsumerGroup;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tokio::time::Instant;

/// What the group's broker says of one partition of the topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionState {
    pub partition: i32,
    /// The group's committed offset, if it has one.
    pub committed: Option<i64>,
    /// The partition's first and next offsets (watermarks).
    pub low: i64,
    pub high: i64,
    /// Some member's assignment names this partition.
    pub owned: bool,
}

impl PartitionState {
    /// Messages not yet committed by the group (from the start when nothing is committed,
    /// as `auto.offset.reset=earliest` reads them).
    fn uncommitted(&self) -> i64 {
        (self.high - self.committed.unwrap_or(self.low).max(self.low)).max(0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// This consumer owns partitions, or no work is left without a consumer.
    Healthy,
    /// Work without a consumer, for less than the bound so far.
    Suspect,
    /// Work without a consumer, untouched for the whole bound, and this consumer settled
    /// in the group with nothing assigned: it rejoins.
    Stalled,
    /// Work without a consumer for the whole bound, while the broker has not finished
    /// rebalancing the group: stalled all the same, but the broker's to end.
    Rebalancing,
}

/// Whether librdkafka has settled in the group: joined, and holding the assignment of the
/// last rebalance (its group state `up`, join state `steady`), as its latest statistics
/// say. Shared between the consumer's context, which records it, and the worker.
#[derive(Debug, Default)]
pub struct Membership(AtomicBool);

impl Membership {
    pub fn record(&self, group: &ConsumerGroup) {
        let settled = group.state == "up" && group.join_state == "steady";
        self.0.store(settled, Ordering::Relaxed);
    }

    pub fn settled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// A new client has not joined yet.
    pub fn forget(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Decides from successive looks whether the group is stalled.
#[derive(Debug)]
pub struct StallDetector {
    bound: Duration,
    /// Since when, and the committed offsets of the orphaned partitions at the last look.
    suspicion: Option<(Instant, BTreeMap<i32, Option<i64>>)>,
}

impl StallDetector {
    pub fn new(bound: Duration) -> Self {
        Self {
            bound,
            suspicion: None,
        }
    }

    /// One look: `own` partitions assigned to this consumer, `settled` its [`Membership`],
    /// `group` the topic's partitions. A rebalance under way does not stop the clock: the
    /// bound past, the verdict is [`Verdict::Rebalancing`] until the consumer settles.
    pub fn observe(
        &mut self,
        now: Instant,
        own: usize,
        settled: bool,
        group: &[PartitionState],
    ) -> Verdict {
        let orphaned: BTreeMap<i32, Option<i64>> = group
            .iter()
            .filter(|p| !p.owned && p.uncommitted() > 0)
            .map(|p| (p.partition, p.committed))
            .collect();
        if own > 0 || orphaned.is_empty() {
            self.suspicion = None;
            return Verdict::Healthy;
        }
        let since = match self.suspicion.take() {
            // A committed offset that moved means somebody consumes after all.
            Some((since, before))
                if !orphaned
                    .iter()
                    .any(|(p, c)| before.get(p).is_some_and(|b| b != c)) =>
            {
                since
            }
            _ => now,
        };
        self.suspicion = Some((since, orphaned));
        match (now.duration_since(since) >= self.bound, settled) {
            (false, _) => Verdict::Suspect,
            (true, true) => Verdict::Stalled,
            (true, false) => Verdict::Rebalancing,
        }
    }

    /// Forgets the suspicion (after a rejoin: the new member gets a bound of its own).
    pub fn reset(&mut self) {
        self.suspicion = None;
    }
}

/// Asks the broker about the group, with a client of its own that never joins it.
pub struct GroupProbe {
    client: BaseConsumer,
    group: String,
    topic: String,
    timeout: Duration,
    /// The broker answered DescribeGroups so far.
    describes: AtomicBool,
}

impl GroupProbe {
    pub fn new(client: BaseConsumer, group: &str, topic: &str) -> Self {
        Self {
            client,
            group: group.to_owned(),
            topic: topic.to_owned(),
            timeout: Duration::from_secs(5),
            describes: AtomicBool::new(true),
        }
    }

    /// Serves the events the client queued (errors, say), so that they do not pile up in
    /// a client that is never polled for messages. Does not block.
    pub fn drain_events(&self) {
        while self.client.poll(Duration::ZERO).is_some() {}
    }

    /// The topic's partitions as the broker sees them. Blocking: call off the runtime.
    pub fn look(&self) -> KafkaResult<Vec<PartitionState>> {
        let metadata = self
            .client
            .fetch_metadata(Some(&self.topic), self.timeout)?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        let mut wanted = TopicPartitionList::new();
        for &p in &partitions {
            wanted.add_partition_offset(&self.topic, p, Offset::Invalid)?;
        }
        let committed = self
            .client
            .committed_offsets(wanted, self.timeout)?
            .to_topic_map();
        let mut states = Vec::with_capacity(partitions.len());
        for &p in &partitions {
            let (low, high) = self.client.fetch_watermarks(&self.topic, p, self.timeout)?;
            let committed = match committed.get(&(self.topic.clone(), p)) {
                Some(Offset::Offset(o)) => Some(*o),
                _ => None,
            };
            states.push(PartitionState {
                partition: p,
                committed,
                low,
                high,
                owned: false,
            });
        }
        // Last, because Tansu drops the connection on it.
        for p in self.owned_partitions() {
            if let Some(state) = states.iter_mut().find(|s| s.partition == p) {
                state.owned = true;
            }
        }
        Ok(states)
    }

    /// The partitions some member of the group owns, as the broker describes them. A
    /// broker that cannot describe the group (Tansu closes the connection) is not asked
    /// again: the committed offsets' progress alone then tells a stall.
    fn owned_partitions(&self) -> HashSet<i32> {
        if !self.describes.load(Ordering::Relaxed) {
            return HashSet::new();
        }
        match self
            .client
            .fetch_group_list(Some(&self.group), self.timeout)
        {
            Ok(groups) => groups
                .groups()
                .iter()
                .flat_map(|g| g.members())
                .filter_map(|m| m.assignment())
                .flat_map(|bytes| assigned_partitions(bytes, &self.topic).unwrap_or_default())
                .collect(),
            Err(e) => {
                if e.rdkafka_error_code() != Some(RDKafkaErrorCode::OperationTimedOut) {
                    tracing::info!(error = %e,
                        "The broker cannot describe the consumer group; stalls are told by committed offsets alone.");
                    self.describes.store(false, Ordering::Relaxed);
                }
                HashSet::new()
            }
        }
    }
}

/// The partitions of `topic` in a consumer-protocol assignment (Kafka's
/// `ConsumerProtocolAssignment`: version, then topics with their partitions, then user
/// data). `None` when the bytes are not such an assignment.
pub fn assigned_partitions(bytes: &[u8], topic: &str) -> Option<HashSet<i32>> {
    struct Reader<'a>(&'a [u8]);
    impl<'a> Reader<'a> {
        fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
            let (head, rest) = self.0.split_first_chunk::<N>()?;
            self.0 = rest;
            Some(*head)
        }
        fn i16(&mut self) -> Option<i16> {
            self.take().map(i16::from_be_bytes)
        }
        fn i32(&mut self) -> Option<i32> {
            self.take().map(i32::from_be_bytes)
        }
        fn bytes(&mut self, len: usize) -> Option<&'a [u8]> {
            let (head, rest) = self.0.split_at_checked(len)?;
            self.0 = rest;
            Some(head)
        }
    }
    let mut r = Reader(bytes);
    r.i16()?; // version
    let mut partitions = HashSet::new();
    for _ in 0..r.i32()?.max(0) {
        let len = usize::try_from(r.i16()?).ok()?;
        let name = r.bytes(len)?;
        for _ in 0..r.i32()?.max(0) {
            let partition = r.i32()?;
            if name == topic.as_bytes() {
                partitions.insert(partition);
            }
        }
    }
    Some(partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(partition: i32, committed: Option<i64>, high: i64, owned: bool) -> PartitionState {
        PartitionState {
            partition,
            committed,
            low: 0,
            high,
            owned,
        }
    }

    const BOUND: Duration = Duration::from_secs(45);

    #[test]
    fn uncommitted_work_nobody_consumes_for_the_bound_is_a_stall() {
        let mut d = StallDetector::new(BOUND);
        let t = Instant::now();
        let group = [
            partition(0, Some(10), 20, false),
            partition(1, None, 0, false),
        ];
        assert_eq!(d.observe(t, 0, true, &group), Verdict::Suspect);
        assert_eq!(d.observe(t + BOUND / 2, 0, true, &group), Verdict::Suspect);
        assert_eq!(d.observe(t + BOUND, 0, true, &group), Verdict::Stalled);
        d.reset();
        assert_eq!(d.observe(t + BOUND * 2, 0, true, &group), Verdict::Suspect);
    }

    #[test]
    fn no_rejoin_is_called_for_while_a_rebalance_is_under_way() {
        let mut d = StallDetector::new(BOUND);
        let t = Instant::now();
        let group = [partition(0, Some(10), 20, false)];
        assert_eq!(d.observe(t, 0, false, &group), Verdict::Suspect);
        assert_eq!(d.observe(t + BOUND, 0, false, &group), Verdict::Rebalancing);
        assert_eq!(
            d.observe(t + BOUND * 3, 0, false, &group),
            Verdict::Rebalancing
        );
        // The clock ran meanwhile: settled with nothing, the stall is declared at once.
        assert_eq!(d.observe(t + BOUND * 3, 0, true, &group), Verdict::Stalled);
    }

    #[test]
    fn membership_is_settled_only_when_joined_and_steady() {
        let m = Membership::default();
        let group = |state: &str, join_state: &str| ConsumerGroup {
            state: state.into(),
            join_state: join_state.into(),
            ..Default::default()
        };
        assert!(!m.settled());
        m.record(&group("up", "steady"));
        assert!(m.settled());
        for (state, join_state) in [
            ("up", "wait-sync"),
            ("up", "init"),
            ("wait-coord", "steady"),
        ] {
            m.record(&group("up", "steady"));
            m.record(&group(state, join_state));
            assert!(!m.settled(), "{state}/{join_state}");
        }
        m.record(&group("up", "steady"));
        m.forget();
        assert!(!m.settled());
    }

    #[test]
    fn nothing_committed_yet_counts_from_the_start_of_the_partition() {
        let mut d = StallDetector::new(BOUND);
        let t = Instant::now();
        let group = [partition(0, None, 5, false)];
        d.observe(t, 0, true, &group);
        assert_eq!(d.observe(t + BOUND, 0, true, &group), Verdict::Stalled);
        // Retention removed everything that was never committed: no work left.
        let gone = [PartitionState {
            low: 5,
            ..partition(0, None, 5, false)
        }];
        assert_eq!(d.observe(t + BOUND * 2, 0, true, &gone), Verdict::Healthy);
    }

    #[test]
    fn owning_partitions_or_having_no_orphaned_work_is_healthy() {
        let mut d = StallDetector::new(BOUND);
        let t = Instant::now();
        let lagging = [partition(0, Some(1), 9, false)];
        assert_eq!(d.observe(t, 3, true, &lagging), Verdict::Healthy);
        let done = [partition(0, Some(9), 9, false)];
        assert_eq!(d.observe(t + BOUND, 0, true, &done), Verdict::Healthy);
        // A member named as owner of the lagging partition: a busy group, not a stall
        // (more consumers than partitions, the owner waiting for ClickHouse).
        let owned = [partition(0, Some(1), 9, true)];
        d.observe(t, 0, true, &owned);
        assert_eq!(d.observe(t + BOUND * 3, 0, true, &owned), Verdict::Healthy);
    }

    #[test]
    fn a_committed_offset_that_moves_restarts_the_clock() {
        let mut d = StallDetector::new(BOUND);
        let t = Instant::now();
        d.observe(t, 0, true, &[partition(0, Some(1), 50, false)]);
        let moved = [partition(0, Some(20), 50, false)];
        assert_eq!(d.observe(t + BOUND, 0, true, &moved), Verdict::Suspect);
        assert_eq!(d.observe(t + BOUND * 2, 0, true, &moved), Verdict::Stalled);
        // Another partition gaining work does not restart it.
        let more = [
            partition(0, Some(20), 50, false),
            partition(1, None, 3, false),
        ];
        assert_eq!(d.observe(t + BOUND * 2, 0, true, &more), Verdict::Stalled);
    }

    fn assignment(topics: &[(&str, &[i32])]) -> Vec<u8> {
        let mut b = 3i16.to_be_bytes().to_vec();
        b.extend((topics.len() as i32).to_be_bytes());
        for (name, partitions) in topics {
            b.extend((name.len() as i16).to_be_bytes());
            b.extend(name.as_bytes());
            b.extend((partitions.len() as i32).to_be_bytes());
            for p in *partitions {
                b.extend(p.to_be_bytes());
            }
        }
        b.extend((-1i32).to_be_bytes()); // no user data
        b
    }

    #[test]
    fn assignments_decode_to_the_topics_partitions() {
        let bytes = assignment(&[("other", &[0, 1]), ("events", &[2, 0])]);
        assert_eq!(
            assigned_partitions(&bytes, "events"),
            Some(HashSet::from([0, 2]))
        );
        assert_eq!(assigned_partitions(&bytes, "none"), Some(HashSet::new()));
        assert_eq!(assigned_partitions(&bytes[..9], "events"), None);
        assert_eq!(assigned_partitions(&[], "events"), None);
    }
}

//! A sink in memory for the router's unit tests: it keeps every batch it took, or answers
//! the failure it was told to, taking nothing of that batch (as Kafka's sink does).

use std::sync::Mutex;

use super::{EventSink, Message, Publishing, SinkError};

/// A message the memory sink took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
}

#[derive(Default)]
pub struct MemorySink {
    /// The batches taken, in order.
    batches: Mutex<Vec<Vec<Taken>>>,
    /// What the next batches are answered; `None`: taken.
    failure: Mutex<Option<SinkError>>,
}

impl MemorySink {
    /// From now on, refuses every batch with `failure`.
    pub fn fail_with(&self, failure: SinkError) {
        *self.failure.lock().expect("not poisoned") = Some(failure);
    }

    /// The batches taken so far.
    pub fn batches(&self) -> Vec<Vec<Taken>> {
        self.batches.lock().expect("not poisoned").clone()
    }

    /// The messages taken so far, of every batch.
    pub fn messages(&self) -> Vec<Taken> {
        self.batches().into_iter().flatten().collect()
    }
}

impl EventSink for MemorySink {
    fn publish<'a>(&'a self, messages: &'a [Message<'a>]) -> Publishing<'a> {
        let failure = *self.failure.lock().expect("not poisoned");
        let answer = match failure {
            Some(failure) => Err(failure),
            None => {
                let batch = messages
                    .iter()
                    .map(|m| Taken {
                        key: m.key.to_vec(),
                        payload: m.payload.to_vec(),
                    })
                    .collect();
                self.batches.lock().expect("not poisoned").push(batch);
                Ok(())
            }
        };
        Box::pin(std::future::ready(answer))
    }
}

//! A story test told in steps: each step runs even when one before it failed, and the test
//! fails at its end naming every step that failed, with its message. A failed step can
//! leave a later one failing too; the first named is the one to read.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt as _;

/// The steps run so far and those that failed.
#[derive(Default)]
pub struct Steps {
    ran: usize,
    failed: Vec<String>,
}

impl Steps {
    /// Runs `step`, recording its panic (a failed assertion) under `name`.
    pub async fn run(&mut self, name: &str, step: impl Future<Output = ()>) {
        self.ran += 1;
        if let Err(panic) = AssertUnwindSafe(step).catch_unwind().await {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            self.failed.push(format!("{name}: {message}"));
        }
    }

    /// Fails when a step failed, naming each.
    pub fn end(self) {
        assert!(
            self.failed.is_empty(),
            "{} of {} steps failed:\n{}",
            self.failed.len(),
            self.ran,
            self.failed.join("\n")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_step_runs_and_each_failure_is_named() {
        let mut steps = Steps::default();
        let mut ran = Vec::new();
        steps.run("one", async { ran.push(1) }).await;
        steps.run("two", async { panic!("two broke") }).await;
        steps.run("three", async { ran.push(3) }).await;
        steps
            .run("four", async { assert_eq!(1 + 1, 3, "four broke") })
            .await;
        assert_eq!(ran, [1, 3]);
        let end = std::panic::catch_unwind(AssertUnwindSafe(|| steps.end()));
        let message = *end.expect_err("fails").downcast::<String>().expect("text");
        assert!(message.starts_with("2 of 4 steps failed:\ntwo: two broke\nfour: "));
        assert!(message.contains("four broke"));
        Steps::default().end();
    }
}

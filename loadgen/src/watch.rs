//! CPU time of the processes around a measurement (`--watch name=pid`): what each used
//! during the measured window, in percent of one core. It shows what a figure is bound by:
//! a process near 100% of a core is the limit.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Context;

/// Processes to watch, by name.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    processes: Vec<(String, u32)>,
}

/// CPU seconds of each process at one moment.
pub struct Sample {
    at: Instant,
    seconds: Vec<Option<f64>>,
}

impl Watch {
    /// Parses `name=pid` arguments; `self` stands for this process.
    pub fn parse(args: &[String]) -> anyhow::Result<Self> {
        let processes = args
            .iter()
            .map(|arg| {
                let (name, pid) = arg.split_once('=').context("--watch takes name=pid")?;
                let pid = if pid == "self" {
                    std::process::id()
                } else {
                    pid.parse().with_context(|| format!("not a pid: {pid}"))?
                };
                Ok((name.to_owned(), pid))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { processes })
    }

    /// This watch and one more process.
    pub fn with(mut self, name: &str, pid: u32) -> Self {
        self.processes.push((name.to_owned(), pid));
        self
    }

    pub fn sample(&self) -> Sample {
        Sample {
            at: Instant::now(),
            seconds: self
                .processes
                .iter()
                .map(|(_, pid)| cpu_seconds(*pid))
                .collect(),
        }
    }

    /// Percent of one core each name's processes used between two samples (the processes
    /// watched under one name, nginx's workers say, summed).
    pub fn usage(&self, from: &Sample, to: &Sample) -> BTreeMap<String, f64> {
        let wall = (to.at - from.at).as_secs_f64().max(1e-9);
        let mut usage = BTreeMap::new();
        for ((name, _), (a, b)) in self
            .processes
            .iter()
            .zip(from.seconds.iter().zip(&to.seconds))
        {
            if let (Some(a), Some(b)) = (a, b) {
                *usage.entry(name.clone()).or_insert(0.0) += (b - a) / wall * 100.0;
            }
        }
        usage
    }
}

/// User plus system CPU seconds of a process, all its threads, from /proc/PID/stat.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: the fields start after its closing parenthesis.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are the 14th and 15th fields, the 12th and 13th after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Linux reports them in USER_HZ, 100 per second on every architecture it runs on.
    Some(ticks as f64 / 100.0)
}

/// Samples `watch` from `delay` after now for `length`: the measured window of a load.
pub fn window(
    watch: Watch,
    delay: std::time::Duration,
    length: std::time::Duration,
) -> tokio::task::JoinHandle<BTreeMap<String, f64>> {
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let from = watch.sample();
        tokio::time::sleep(length).await;
        watch.usage(&from, &watch.sample())
    })
}

/// The machine's busy CPU from `delay` after now for `length`, percent of one core
/// (all cores busy: 100 times the cores).
pub fn machine_window(
    delay: std::time::Duration,
    length: std::time::Duration,
) -> tokio::task::JoinHandle<f64> {
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let from = cpu_ticks();
        tokio::time::sleep(length).await;
        let to = cpu_ticks();
        match (from, to) {
            (Some((busy_a, all_a)), Some((busy_b, all_b))) if all_b > all_a => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
                (busy_b - busy_a) as f64 / (all_b - all_a) as f64 * 100.0 * cores
            }
            _ => f64::NAN,
        }
    })
}

/// Busy and all ticks of every core, from /proc/stat (idle and iowait are not busy).
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let all: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4)?;
    Some((all - idle, all))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_its_own_cpu_while_it_spins() {
        // One interval, watched once and twice under one name: on a busy machine the spin
        // gets less of a core, so only what it got is compared, not a share of the wall.
        let once = Watch::parse(&["me=self".to_owned()]).unwrap();
        let twice = Watch::parse(&["me=self".to_owned(), "me=self".to_owned()]).unwrap();
        let (before_once, before_twice) = (once.sample(), twice.sample());
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed().as_millis() < 500 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let (after_once, after_twice) = (once.sample(), twice.sample());
        let single = once.usage(&before_once, &after_once)["me"];
        let double = twice.usage(&before_twice, &after_twice)["me"];
        assert!(single > 1.0, "{single}");
        // Watched twice under one name, the process counts twice (clock ticks of 10 ms).
        assert!(
            (1.5 * single..=2.5 * single).contains(&double),
            "{single} {double}"
        );
        assert!(Watch::parse(&["x".to_owned()]).is_err());
    }

    #[test]
    fn the_machine_ticks_are_read() {
        let (busy, all) = cpu_ticks().expect("/proc/stat");
        assert!(busy <= all && all > 0);
    }
}

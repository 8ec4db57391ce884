//! The memory sampler: every second, each service's pid (from its pid file, so a restarted
//! service is followed to its new process), resident memory and peak (VmRSS and VmHWM,
//! KiB) from `/proc/PID/status`, one line each in `rss.log`, which the verdict reads.

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;

use stack_kit::process::status_kib;

/// `rss.log`'s first line.
pub const HEADER: &str = "# ms service pid VmRSS_KiB VmHWM_KiB";

/// VmRSS and VmHWM (KiB) of a `/proc/PID/status` text; none without VmRSS (a kernel
/// thread, or a process on its way out).
pub fn rss_hwm(status: &str) -> Option<(u64, Option<u64>)> {
    Some((status_kib(status, "VmRSS:")?, status_kib(status, "VmHWM:")))
}

/// One line of `rss.log`: when, which service, its pid, VmRSS and VmHWM.
pub fn line(ms: u128, service: &str, pid: &str, rss: u64, hwm: Option<u64>) -> String {
    let hwm = hwm.map_or(String::new(), |h| h.to_string());
    format!("{ms} {service} {pid} {rss} {hwm}")
}

/// A sampler running on a thread of its own until stopped (or dropped).
pub struct Sampler {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    /// Samples `services` (name and pid file) every second, appending to `log`, which gets
    /// its header first.
    pub fn start(log: PathBuf, services: Vec<(String, PathBuf)>) -> anyhow::Result<Self> {
        let mut out = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        writeln!(out, "{HEADER}")?;
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut out = std::io::BufWriter::new(out);
            loop {
                let ms = unix_ms();
                for (service, pidfile) in &services {
                    let Ok(pid) = std::fs::read_to_string(pidfile) else {
                        continue;
                    };
                    let pid = pid.trim();
                    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                        continue;
                    };
                    if let Some((rss, hwm)) = rss_hwm(&status) {
                        // A full disk loses samples, which the verdict then lacks.
                        let _ = writeln!(out, "{}", line(ms, service, pid, rss, hwm));
                    }
                }
                let _ = out.flush();
                match stopped.recv_timeout(Duration::from_secs(1)) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => break,
                }
            }
        });
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Takes the last sample's round to its end, then stops.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Milliseconds since the Unix epoch, the clock of faults.log, answers.log and rss.log.
pub fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_and_peak_are_read_from_a_status_text() {
        let status = "Name:\tingest\nVmPeak:\t  900 kB\nVmHWM:\t   2048 kB\nVmRSS:\t   1024 kB\n";
        assert_eq!(rss_hwm(status), Some((1024, Some(2048))));
        assert_eq!(rss_hwm("Name:\tkthreadd\nVmHWM:\t1 kB\n"), None);
        assert_eq!(
            line(5, "ingest", "42", 1024, Some(2048)),
            "5 ingest 42 1024 2048"
        );
        assert_eq!(line(5, "ingest", "42", 1024, None), "5 ingest 42 1024 ");
    }

    #[test]
    fn the_sampler_follows_the_pid_file() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("me.pid");
        std::fs::write(&pidfile, format!("{}\n", std::process::id())).unwrap();
        let log = dir.path().join("rss.log");
        let sampler = Sampler::start(
            log.clone(),
            vec![
                ("me".to_owned(), pidfile),
                ("absent".to_owned(), dir.path().join("absent.pid")),
            ],
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        sampler.stop();
        let text = std::fs::read_to_string(log).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], HEADER);
        assert_eq!(lines.len(), 3, "{text}");
        let fields: Vec<&str> = lines[1].split(' ').collect();
        assert_eq!(fields[1..3], ["me", &std::process::id().to_string()]);
        assert!(fields[3].parse::<u64>().unwrap() > 0, "{text}");
    }
}

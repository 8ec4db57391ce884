//! Background processes recorded by pid files: starting one, whether it runs, waiting for
//! it to be ready, stopping it; and the probes the waits use.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// A memory line of a `/proc/PID/status` text (`VmRSS:`, `VmHWM:`...) in KiB.
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some(key)).then(|| words.next()?.parse().ok())?
    })
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `T`, `Z`…); none when the pid is gone.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The process lives (a zombie, killed but not yet reaped, does not).
pub fn is_running(pid: u32) -> bool {
    state(pid).is_some_and(|s| s != 'Z')
}

/// The pid a pid file records.
pub fn read_pid(path: &Path) -> anyhow::Result<u32> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.trim()
        .parse()
        .with_context(|| format!("no pid in {}", path.display()))
}

/// The process a pid file records lives. The file can go at any moment (nginx removes its
/// own as it exits): then it does not.
pub fn pidfile_running(pidfile: &Path) -> bool {
    read_pid(pidfile).is_ok_and(is_running)
}

/// Stops the process of `pidfile`: SIGTERM, up to 20 s, then SIGKILL; the file removed.
pub fn stop(pidfile: &Path, name: &str) -> anyhow::Result<()> {
    if let Ok(pid) = read_pid(pidfile)
        && is_running(pid)
    {
        crate::log(&format!("Stopping {name} (pid {pid})"));
        let _ = signal(pid, "TERM");
        if !wait_gone(pid, Duration::from_secs(20)) {
            let _ = signal(pid, "KILL");
        }
    }
    match std::fs::remove_file(pidfile) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove {}", pidfile.display()))
        }
        _ => Ok(()),
    }
}

/// Waits up to `limit` for `pid` to stop running; whether it did.
pub fn wait_gone(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while is_running(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Sends `signal` (`TERM`, `KILL`, `STOP`…) to `pid` with kill(1).
pub fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .context("kill does not run")?;
    anyhow::ensure!(status.success(), "kill -{signal} {pid} failed");
    Ok(())
}

/// Where a background process writes, and how private what it writes is.
pub struct Output<'a> {
    /// Its stdout and stderr.
    pub log: &'a Path,
    /// Appended to across starts (a service's log), or started afresh (a server's).
    pub append: bool,
    /// Under umask 077, its log too: its owner's only (the broker and the services, whose
    /// files hold visitors' events and ids).
    pub private: bool,
}

/// Starts `command` in the background as a script's `command &` would: stdin from
/// /dev/null, stdout and stderr to `output.log`, SIGINT and SIGQUIT ignored (a Ctrl-C on
/// the script that started it does not stop it), and records its pid in `pidfile` (mode
/// 600). The process outlives this one; a thread here reaps it if it ends first. Only the
/// variables `command` sets are passed on (over this process's environment).
pub fn spawn(command: &mut Command, output: Output, pidfile: &Path) -> anyhow::Result<u32> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.create(true);
    if output.append {
        options.append(true);
    } else {
        options.write(true).truncate(true);
    }
    if output.private {
        // As the process's umask would make it.
        options.mode(0o600);
    }
    let log = output.log;
    let out = options
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    // Through the shell: std's Command sets no umask and no ignored signals, and the
    // workspace forbids unsafe. Signals ignored stay ignored across exec.
    let script = if output.private {
        "trap '' INT QUIT; umask 077; exec \"$@\""
    } else {
        "trap '' INT QUIT; exec \"$@\""
    };
    let mut wrapped = Command::new("sh");
    wrapped
        .args(["-c", script, "sh"])
        .arg(command.get_program())
        .args(command.get_args())
        .envs(
            command
                .get_envs()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))),
        )
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    if let Some(dir) = command.get_current_dir() {
        wrapped.current_dir(dir);
    }
    let mut child = wrapped
        .spawn()
        .with_context(|| format!("cannot start {}", command.get_program().display()))?;
    let pid = child.id();
    write_private(pidfile, &format!("{pid}\n"))?;
    std::thread::spawn(move || child.wait());
    Ok(pid)
}

/// Writes `text` to `path` through a new file renamed over it, readable by its owner only.
pub fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let new = PathBuf::from(format!("{}.new", path.display()));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&new)
        .with_context(|| format!("cannot write {}", new.display()))?;
    file.write_all(text.as_bytes())?;
    std::fs::rename(&new, path).with_context(|| format!("cannot write {}", path.display()))
}

/// `path` made if missing, its content kept, readable by its owner only.
pub fn private_file(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|_| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)))
        .with_context(|| format!("cannot make {} private", path.display()))
}

/// Polls `ready` every 0.2 s for up to `limit` while the process of `pidfile` lives. On
/// failure the end of `log` goes to stderr, and the error says which.
pub fn wait_ready(
    limit: Duration,
    pidfile: &Path,
    log: &Path,
    what: &str,
    ready: impl Fn() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if ready() {
            return Ok(());
        }
        if !pidfile_running(pidfile) {
            print_tail(log);
            anyhow::bail!("{what} exited during start-up (log: {})", log.display());
        }
        if Instant::now() >= deadline {
            print_tail(log);
            anyhow::bail!(
                "{what} did not become ready within {}s (log: {})",
                limit.as_secs(),
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The last 20 lines of `log` on stderr.
pub fn print_tail(log: &Path) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    for line in &lines[lines.len().saturating_sub(20)..] {
        eprintln!("{line}");
    }
}

/// Something accepts connections on 127.0.0.1:`port`. A connection to itself (the kernel
/// gave it the free port as its own, TCP's simultaneous open) is not something listening.
pub fn tcp_open(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))
        .is_ok_and(|s| s.local_addr().ok() != s.peer_addr().ok())
}

/// Nothing accepts connections on 127.0.0.1:`port`.
pub fn port_free(port: u16) -> bool {
    !tcp_open(port)
}

/// Waits up to 5 s for 127.0.0.1:`port` to be free, for `what` to listen there: a process
/// just killed (SIGKILL) is gone from the process table while its threads still close
/// their sockets. An error names the port and `what` if it stays taken.
pub fn claim_port(port: u16, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !port_free(port) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "port {port} is taken by another program ({what})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// `port` if nothing listens there, else the next free one above it.
pub fn free_port_from(port: u16) -> u16 {
    (port..=u16::MAX).find(|p| port_free(*p)).unwrap_or(port)
}

/// A GET of `path_and_query` on 127.0.0.1:`port` answers 2xx within 2 s. A readiness
/// probe on loopback, HTTP/1.0 by hand: the servers probed (ClickHouse, ZooKeeper's
/// neighbours, the services, nginx) all speak it.
pub fn http_ok(port: u16, path_and_query: &str) -> bool {
    http_ok_with(port, path_and_query, "")
}

/// [`http_ok`] with more request headers, each line ending in CRLF.
pub fn http_ok_with(port: u16, path_and_query: &str, headers: &str) -> bool {
    let answer = || -> std::io::Result<[u8; 12]> {
        let mut stream =
            TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.set_write_timeout(Some(Duration::from_secs(2)))?;
        let request =
            format!("GET {path_and_query} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n{headers}\r\n");
        stream.write_all(request.as_bytes())?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head)?;
        Ok(head)
    };
    // "HTTP/1.1 200"
    answer().is_ok_and(|head| head.starts_with(b"HTTP/1.") && head[9] == b'2')
}

/// `dir` made if missing, readable by its owner only (700), and every file already in it
/// too (600): broker files and service logs hold visitors' events and ids. What is written
/// there later gets its mode from its writer's umask (077 for what [`spawn`] starts).
pub fn private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    fn files(dir: &Path) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                files(&entry.path())?;
            } else if kind.is_file() {
                let mut mode = entry.metadata()?.permissions().mode();
                mode &= !0o077;
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode))?;
            }
        }
        Ok(())
    }
    files(dir).with_context(|| format!("cannot make {} private", dir.display()))
}

/// Runs `command` to its end; an error unless it succeeds.
pub fn run(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("{} does not run", command.get_program().display()))?;
    anyhow::ensure!(
        status.success(),
        "{} failed: {status}",
        command.get_program().display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sh` making the file `made` in `dir`, then sleeping, started by [`spawn`].
    fn sleeper(dir: &Path, append: bool, private: bool) -> u32 {
        let _ = std::fs::remove_file(dir.join("made"));
        spawn(
            Command::new("sh")
                .args(["-c", "echo started; touch made; exec sleep 30"])
                .current_dir(dir),
            Output {
                log: &dir.join("p.log"),
                append,
                private,
            },
            &dir.join("p.pid"),
        )
        .unwrap()
    }

    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_started_process_is_recorded_awaited_and_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let (pidfile, log) = (dir.path().join("p.pid"), dir.path().join("p.log"));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let pid = sleeper(dir.path(), true, true);
        assert_eq!(read_pid(&pidfile).unwrap(), pid);
        assert!(pidfile_running(&pidfile));
        wait_ready(Duration::from_secs(5), &pidfile, &log, "sleep", || {
            dir.path().join("made").exists()
        })
        .unwrap();
        // Private: what it makes, and its log, are its owner's only.
        assert_eq!(mode(&dir.path().join("made")) & 0o077, 0);
        assert_eq!(mode(&log) & 0o077, 0, "the log is its owner's only");
        // A Ctrl-C on the script that started it does not stop it.
        signal(pid, "INT").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(is_running(pid), "SIGINT stopped it");
        // Never ready: the wait ends at its limit, saying so.
        let late = wait_ready(Duration::from_millis(500), &pidfile, &log, "sleep", || {
            tcp_open(port)
        })
        .unwrap_err();
        assert!(
            late.to_string().contains("did not become ready within"),
            "{late}"
        );
        stop(&pidfile, "sleep").unwrap();
        assert!(!pidfile.exists());
        std::thread::sleep(Duration::from_millis(200));
        assert!(!is_running(pid));
        assert!(std::fs::read_to_string(&log).unwrap().contains("started"));
    }

    #[test]
    fn a_servers_log_starts_afresh_and_a_services_grows() {
        let dir = tempfile::tempdir().unwrap();
        let (pidfile, log) = (dir.path().join("p.pid"), dir.path().join("p.log"));
        let started = |append| {
            sleeper(dir.path(), append, false);
            wait_ready(Duration::from_secs(5), &pidfile, &log, "sleep", || {
                dir.path().join("made").exists()
            })
            .unwrap();
            stop(&pidfile, "sleep").unwrap();
            std::fs::read_to_string(&log)
                .unwrap()
                .matches("started")
                .count()
        };
        assert_eq!(started(true), 1);
        assert_eq!(started(true), 2);
        assert_eq!(started(false), 1);
        // Not private: the process's own umask.
        assert_ne!(mode(&dir.path().join("made")) & 0o044, 0);
    }

    #[test]
    fn a_process_that_exits_during_its_wait_ends_it_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("p.pid");
        let log = dir.path().join("p.log");
        spawn(
            Command::new("sh").args(["-c", "echo broken config; exit 3"]),
            Output {
                log: &log,
                append: false,
                private: false,
            },
            &pidfile,
        )
        .unwrap();
        let started = Instant::now();
        let error = wait_ready(Duration::from_secs(30), &pidfile, &log, "x", || false).unwrap_err();
        assert!(
            error.to_string().contains("x exited during start-up"),
            "{error}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn the_http_probe_wants_a_2xx_answer() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            for answer in ["HTTP/1.1 200 OK\r\n\r\n", "HTTP/1.1 503 No\r\n\r\n"] {
                let (mut stream, _) = listener.accept().unwrap();
                let mut request = Vec::new();
                let mut byte = [0u8];
                while !request.ends_with(b"\r\n\r\n") {
                    stream.read_exact(&mut byte).unwrap();
                    request.push(byte[0]);
                }
                assert!(request.starts_with(b"GET /ping HTTP/1.0\r\n"));
                stream.write_all(answer.as_bytes()).unwrap();
            }
        });
        assert!(http_ok(port, "/ping"));
        assert!(!http_ok(port, "/ping"));
        server.join().unwrap();
        assert!(!http_ok(port, "/ping"), "nobody listens");
    }

    #[test]
    fn a_free_port_is_the_first_nobody_listens_on() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = listener.local_addr().unwrap().port();
        assert!(tcp_open(taken));
        assert_ne!(free_port_from(taken), taken);
        drop(listener);
        // One run in a dozen still found the port open right after the drop, even a port
        // below the ephemeral range: most likely a child another test forked at that
        // moment, which holds the listener until its exec.
        let deadline = Instant::now() + Duration::from_secs(2);
        while tcp_open(taken) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(free_port_from(taken), taken);
    }

    #[test]
    fn a_private_dir_closes_what_is_already_in_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("logs/deep");
        std::fs::create_dir_all(&inner).unwrap();
        let file = inner.join("a.log");
        std::fs::write(&file, "x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        private_dir(&dir.path().join("logs")).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join("logs")), 0o700);
        assert_eq!(mode(&file), 0o600);
    }
}

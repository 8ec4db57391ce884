//! ClickHouse servers of the stack's own: one server, or the cluster `analytics` (two
//! shards of two replicas) with its standalone ZooKeeper; and the services' users.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;

use crate::process::{self, http_ok};

/// The servers of the cluster: 1 and 2 are the first shard, 3 and 4 the second.
pub const CLUSTER_SERVERS: u16 = 4;

/// A ClickHouse server's own folder and ports.
pub struct Server<'a> {
    /// Data, logs, configuration and pid file.
    pub dir: &'a Path,
    pub http_port: u16,
    pub tcp_port: u16,
    /// A file merged over the configuration, from `config.d/`.
    pub extra_config: Option<&'a Path>,
    /// Over the server's environment (the bench's peers give it another librdkafka).
    pub env: &'a [(String, String)],
}

/// Starts the server of `server.dir` unless it runs: `deploy/clickhouse/config.xml` and
/// `users.xml` of `repo` with its folder and ports, run as the `clickhouse` user, and
/// waits up to 60 s for its `/ping`.
pub fn start(repo: &Path, server: &Server) -> anyhow::Result<()> {
    let dir = server.dir;
    let pidfile = dir.join("clickhouse.pid");
    if process::pidfile_running(&pidfile) {
        return Ok(());
    }
    let (http, tcp) = (server.http_port, server.tcp_port);
    process::claim_port(http, "ClickHouse HTTP")?;
    process::claim_port(tcp, "ClickHouse native")?;
    prepare(repo, server)?;
    crate::log(&format!(
        "Starting ClickHouse on 127.0.0.1:{http} (data in {})",
        dir.display()
    ));
    let mut command = server_command(dir);
    command.envs(server.env.iter().map(|(k, v)| (k, v)));
    let output = process::Output {
        log: &dir.join("log/stdout.log"),
        append: false,
        private: false,
    };
    process::spawn(&mut command, output, &pidfile)?;
    process::wait_ready(
        Duration::from_secs(60),
        &pidfile,
        &dir.join("log/clickhouse-server.err.log"),
        &format!("ClickHouse on port {http}"),
        || http_ok(http, "/ping"),
    )
}

/// The server of `dir` ([`prepare`]d), run as the `clickhouse` user.
pub fn server_command(dir: &Path) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid",
            "clickhouse",
            "--regid",
            "clickhouse",
            "--init-groups",
            "--",
        ])
        .arg("clickhouse-server")
        .arg(format!(
            "--config-file={}",
            dir.join("config.xml").display()
        ));
    command
}

/// The folders and configuration of the server of `server.dir` (`deploy/clickhouse/`
/// with its folder and ports, and its extra configuration), owned by the `clickhouse`
/// user; what a start needs before the server runs.
pub fn prepare(repo: &Path, server: &Server) -> anyhow::Result<()> {
    let (dir, http, tcp) = (server.dir, server.http_port, server.tcp_port);
    for sub in ["data", "tmp", "user_files", "format_schemas", "log"] {
        std::fs::create_dir_all(dir.join(sub))
            .with_context(|| format!("cannot make {}", dir.join(sub).display()))?;
    }
    let config = read(&repo.join("deploy/clickhouse/config.xml"))?
        .replace("@DIR@", &dir.display().to_string())
        .replace("@HTTP_PORT@", &http.to_string())
        .replace("@TCP_PORT@", &tcp.to_string());
    std::fs::write(dir.join("config.xml"), config)
        .with_context(|| format!("cannot write {}/config.xml", dir.display()))?;
    std::fs::copy(
        repo.join("deploy/clickhouse/users.xml"),
        dir.join("users.xml"),
    )
    .with_context(|| format!("cannot write {}/users.xml", dir.display()))?;
    // Left by releases whose analysts read through a user with every right (access_reader).
    for old in ["users.d/access_reader.xml", "config.d/analytics-access.xml"] {
        let _ = std::fs::remove_file(dir.join(old));
    }
    if let Some(extra) = server.extra_config {
        std::fs::create_dir_all(dir.join("config.d"))?;
        std::fs::copy(extra, dir.join("config.d/extra.xml"))
            .with_context(|| format!("cannot copy {}", extra.display()))?;
    }
    process::run(
        Command::new("chown")
            .args(["-R", "clickhouse:clickhouse"])
            .arg(dir),
    )?;
    Ok(())
}

/// Stops the server of `dir`.
pub fn stop(dir: &Path, name: &str) -> anyhow::Result<()> {
    process::stop(&dir.join("clickhouse.pid"), name)
}

/// The ClickHouse user `name` of a service on the server of `dir` (made before
/// [`start`], or the server takes a few seconds to see it), its password kept in `secret`
/// (made once: 32 random hex characters, readable by its owner only) and stored as its
/// SHA-256 in `dir/users.d/NAME.xml`. It reaches the server from loopback only. It may use
/// every database: on 18.x the materialized views that fill each analyst's copy
/// (`analytics-access`, a database `analyst_NAME` per analyst) run with the rights of the
/// user that inserts, and 18.x names allowed databases one by one, so a list would stop
/// the consumer's inserts at the first grant. `default`, loopback only too (users.xml),
/// stays the operators' user.
pub fn service_user(dir: &Path, name: &str, secret: &Path) -> anyhow::Result<()> {
    let hash = crate::sha256_hex(password(secret)?.as_bytes());
    std::fs::create_dir_all(dir.join("users.d"))?;
    let file = dir.join(format!("users.d/{name}.xml"));
    process::write_private(
        &file,
        &format!(
            "<?xml version=\"1.0\"?>\n\
             <!-- stack-kit clickhouse::service_user: the password is in {} -->\n\
             <yandex><users><{name}>\n\
             \x20 <password_sha256_hex>{hash}</password_sha256_hex>\n\
             \x20 <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>\n\
             \x20 <profile>default</profile><quota>default</quota>\n\
             </{name}></users></yandex>\n",
            secret.display()
        ),
    )?;
    // The server reads it as its own user; before the first start the folder is root's.
    let _ = Command::new("chown")
        .args(["-R", "clickhouse:clickhouse"])
        .arg(dir.join("users.d"))
        .stderr(std::process::Stdio::null())
        .status();
    Ok(())
}

/// The password in `secret`, made first if missing.
pub fn password(secret: &Path) -> anyhow::Result<String> {
    if std::fs::metadata(secret).is_ok_and(|m| m.len() > 0) {
        return Ok(read(secret)?.trim_end_matches('\n').to_owned());
    }
    if let Some(parent) = secret.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut random = [0u8; 16];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .context("cannot read /dev/urandom")?;
    let password = crate::hex(&random);
    process::write_private(secret, &password)?;
    Ok(password)
}

/// User `name` with the password in `secret` logs in to the server on `http_port` (a
/// running server reads a new users.d file within seconds, not at once).
pub fn user_ok(http_port: u16, name: &str, secret: &Path) -> bool {
    use base64::Engine;
    std::fs::read_to_string(secret).is_ok_and(|password| {
        let credentials = base64::engine::general_purpose::STANDARD
            .encode(format!("{name}:{}", password.trim_end_matches('\n')));
        process::http_ok_with(
            http_port,
            "/?query=SELECT%201",
            &format!("Authorization: Basic {credentials}\r\n"),
        )
    })
}

/// The cluster's ports: server N listens on each base + N - 1.
#[derive(Clone, Copy, Debug)]
pub struct ClusterPorts {
    pub zookeeper: u16,
    pub http: u16,
    pub tcp: u16,
    pub interserver: u16,
}

/// Starts whatever of the cluster of `dir` is not running: ZooKeeper, then each server,
/// `dir/chN`, its replica name `chN`, with `deploy/clickhouse/cluster.xml.in` merged over
/// its configuration.
pub fn start_cluster(repo: &Path, dir: &Path, ports: ClusterPorts) -> anyhow::Result<()> {
    start_zookeeper(&dir.join("zookeeper"), ports.zookeeper)?;
    let template = read(&repo.join("deploy/clickhouse/cluster.xml.in"))?;
    for n in 1..=CLUSTER_SERVERS {
        let server_dir = dir.join(format!("ch{n}"));
        std::fs::create_dir_all(&server_dir)?;
        let mut config = template
            .replace("@SHARD@", &format!("0{}", n.div_ceil(2)))
            .replace("@REPLICA@", &format!("ch{n}"))
            .replace(
                "@INTERSERVER_PORT@",
                &(ports.interserver + n - 1).to_string(),
            )
            .replace("@ZOOKEEPER_PORT@", &ports.zookeeper.to_string());
        for m in 1..=CLUSTER_SERVERS {
            config = config.replace(&format!("@TCP_PORT_{m}@"), &(ports.tcp + m - 1).to_string());
        }
        let config_file = dir.join(format!("ch{n}.cluster.xml"));
        std::fs::write(&config_file, config)?;
        start(
            repo,
            &Server {
                dir: &server_dir,
                http_port: ports.http + n - 1,
                tcp_port: ports.tcp + n - 1,
                extra_config: Some(&config_file),
                env: &[],
            },
        )?;
    }
    Ok(())
}

/// Stops the cluster of `dir`: its servers, then ZooKeeper.
pub fn stop_cluster(dir: &Path) -> anyhow::Result<()> {
    for n in 1..=CLUSTER_SERVERS {
        stop(&dir.join(format!("ch{n}")), &format!("clickhouse ch{n}"))?;
    }
    process::stop(&dir.join("zookeeper/zookeeper.pid"), "zookeeper")
}

/// The consumer's `CLICKHOUSE_URL` for the cluster whose first server listens for HTTP on
/// `http`: shards separated by `;`, the replicas of a shard by `,`.
pub fn cluster_urls(http: u16) -> String {
    let url = |n: u16| format!("http://127.0.0.1:{}", http + n);
    format!("{},{};{},{}", url(0), url(1), url(2), url(3))
}

/// A standalone ZooKeeper (Debian's), data in `dir`, unless it runs.
fn start_zookeeper(dir: &Path, port: u16) -> anyhow::Result<()> {
    let pidfile = dir.join("zookeeper.pid");
    if process::pidfile_running(&pidfile) {
        return Ok(());
    }
    process::claim_port(port, "ZooKeeper")?;
    std::fs::create_dir_all(dir.join("data"))?;
    std::fs::write(
        dir.join("zoo.cfg"),
        format!(
            "dataDir={}\nclientPortAddress=127.0.0.1\nclientPort={port}\ntickTime=2000\n\
             admin.enableServer=false\n4lw.commands.whitelist=srvr\n",
            dir.join("data").display()
        ),
    )?;
    crate::log(&format!(
        "Starting ZooKeeper on 127.0.0.1:{port} (data in {})",
        dir.display()
    ));
    let log = dir.join("zookeeper.log");
    process::spawn(
        Command::new("java")
            .args(["-Xmx256m", "-cp", "/usr/share/java/zookeeper.jar"])
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(dir.join("zoo.cfg")),
        process::Output {
            log: &log,
            append: false,
            private: false,
        },
        &pidfile,
    )?;
    process::wait_ready(
        Duration::from_secs(60),
        &pidfile,
        &log,
        &format!("ZooKeeper on port {port}"),
        || zookeeper_ok(port),
    )
}

/// ZooKeeper serves requests (`ruok` says imok before the data is loaded).
fn zookeeper_ok(port: u16) -> bool {
    use std::io::{Read, Write};
    let answer = || -> std::io::Result<String> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.write_all(b"srvr")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text)
    };
    answer().is_ok_and(|text| text.contains("Mode: standalone"))
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_user_keeps_its_password_and_stores_only_its_hash() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secrets/consumer");
        service_user(dir.path(), "consumer", &secret).unwrap();
        let password = std::fs::read_to_string(&secret).unwrap();
        assert_eq!(password.len(), 32);
        assert!(password.bytes().all(|b| b.is_ascii_hexdigit()));
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        let file = std::fs::read_to_string(dir.path().join("users.d/consumer.xml")).unwrap();
        assert!(!file.contains(&password));
        // The hash sha256sum(1) gives, as the server compares it.
        let expected = crate::sha256_hex(password.as_bytes());
        assert!(file.contains(&format!(
            "<password_sha256_hex>{expected}</password_sha256_hex>"
        )));
        assert!(file.contains("<networks><ip>127.0.0.1</ip><ip>::1</ip></networks>"));
        // Made once: a second call keeps it.
        service_user(dir.path(), "consumer", &secret).unwrap();
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), password);
    }

    #[test]
    fn the_sha256_is_the_standard_one() {
        assert_eq!(
            crate::sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn cluster_urls_separate_shards_and_replicas() {
        assert_eq!(
            cluster_urls(28123),
            "http://127.0.0.1:28123,http://127.0.0.1:28124;\
             http://127.0.0.1:28125,http://127.0.0.1:28126"
        );
    }
}

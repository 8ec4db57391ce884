//! The nginx front: the contract's one base URL before the ingest and the config-api, and
//! the SDK's scripts (`deploy/nginx/`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;

use crate::process::{self, http_ok};

/// The front's configuration, `deploy/nginx/local.conf.in` with the SDK's versioned path
/// (`sdk-versioned.conf.in`) after its routes, its files in `dir`, listening on `listen`
/// before `ingest` and `config_api` (`host:port` each).
pub fn render(
    repo: &Path,
    dir: &Path,
    listen: &str,
    ingest: &str,
    config_api: &str,
) -> anyhow::Result<String> {
    let nginx = repo.join("deploy/nginx");
    let read = |name: &str| {
        std::fs::read_to_string(nginx.join(name))
            .with_context(|| format!("cannot read deploy/nginx/{name}"))
    };
    let versioned = read("sdk-versioned.conf.in")?;
    let mut text = String::new();
    for line in read("local.conf.in")?.lines() {
        text.push_str(line);
        text.push('\n');
        if line.contains("include @ROUTES@;") {
            text.push_str(&versioned);
        }
    }
    let path = |p: &Path| p.display().to_string();
    Ok(text
        .replace("@NGINX_DIR@", &path(dir))
        .replace("@LISTEN@", listen)
        .replace("@INGEST@", ingest)
        .replace("@CONFIG_API@", config_api)
        .replace("@ROUTES@", &path(&nginx.join("routes.conf")))
        .replace("@SDK_DIST@", &path(&repo.join("sdk/dist")))
        .replace("@SDK_RELEASES@", &path(&repo.join("sdk/releases")))
        .replace("@SDK_HEADERS@", &path(&nginx.join("sdk-headers.conf"))))
}

/// The front of `dir` on 127.0.0.1:`port`: started, or reloaded when its configuration
/// changed; then up to 20 s for its `/healthz`.
pub fn start(
    repo: &Path,
    dir: &Path,
    port: u16,
    ingest: &str,
    config_api: &str,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join("tmp"))?;
    // Its logs are its owner's only (it opens them as root, its workers inherit them); the
    // folder stays open: the workers, another user, write request bodies to tmp/.
    for log in ["access.log", "error.log"] {
        process::private_file(&dir.join(log))?;
    }
    let conf = dir.join("nginx.conf");
    let pidfile = dir.join("nginx.pid");
    let rendered = render(repo, dir, &format!("127.0.0.1:{port}"), ingest, config_api)?;
    let nginx = |args: &[&str]| {
        process::run(
            Command::new("nginx")
                .arg("-p")
                .arg(dir)
                .arg("-c")
                .arg(&conf)
                .args(args),
        )
    };
    if process::pidfile_running(&pidfile) {
        if std::fs::read_to_string(&conf).ok().as_deref() != Some(rendered.as_str()) {
            std::fs::write(&conf, rendered)?;
            crate::log("Reloading nginx");
            nginx(&["-s", "reload"])?;
        }
    } else {
        std::fs::write(&conf, rendered)?;
        process::claim_port(port, "nginx front")?;
        crate::log(&format!("Starting nginx on 127.0.0.1:{port}"));
        nginx(&[])?;
    }
    // nginx writes its pid file once it has forked.
    for _ in 0..50 {
        if std::fs::metadata(&pidfile).is_ok_and(|m| m.len() > 0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    process::wait_ready(
        Duration::from_secs(20),
        &pidfile,
        &dir.join("error.log"),
        "nginx",
        || http_ok(port, "/healthz"),
    )
}

/// Stops the front of `dir`.
pub fn stop(dir: &Path) -> anyhow::Result<()> {
    process::stop(&dir.join("nginx.pid"), "nginx")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_is_rendered_whole_with_the_sdk_after_its_routes() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let text = render(
            &repo,
            Path::new("/n"),
            "127.0.0.1:1",
            "127.0.0.1:2",
            "127.0.0.1:3",
        )
        .unwrap();
        let config: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect();
        assert!(config.iter().all(|l| !l.contains('@')), "{text}");
        let routes = config
            .iter()
            .position(|l| {
                l.contains(&format!(
                    "include {}",
                    repo.join("deploy/nginx/routes.conf").display()
                ))
            })
            .expect("the routes included");
        let versioned =
            std::fs::read_to_string(repo.join("deploy/nginx/sdk-versioned.conf.in")).unwrap();
        let first = versioned
            .lines()
            .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .unwrap();
        let sdk = config
            .iter()
            .position(|l| l.trim() == first.trim())
            .expect("the SDK's path");
        assert!(sdk > routes);
        assert!(text.contains("pid /n/nginx.pid;"));
        assert!(text.contains("listen 127.0.0.1:1;"));
    }
}

//! The nginx fronts pass `nginx -t`, and serve every released version of the SDK.

use super::*;

fn nginx_check(name: &str, conf: &str) {
    let dir = tempfile::tempdir().expect("folder");
    let path = dir.path().join(name);
    std::fs::write(&path, conf).expect("conf written");
    let mut command = std::process::Command::new("nginx");
    command
        .arg("-t")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&path);
    assert_accepts(command, "nginx -t", name);
}

/// A server block of a container's nginx (`/etc/nginx/X` mounted from `deploy/nginx/X`),
/// its upstreams' service names mapped to loopback, as a whole configuration run from `dir`.
fn container_nginx(file: &str, dir: &std::path::Path) -> String {
    let mut server = e2e::container_server(file, "127.0.0.1:8081", "127.0.0.1:8082");
    for include in ["routes.conf", "sdk-headers.conf"] {
        let path = repo().join("deploy/nginx").join(include);
        server = server.replace(
            &format!("/etc/nginx/{include}"),
            &path.display().to_string(),
        );
    }
    // Rendered into the front image by the Dockerfile, the same way.
    let versioned = read("deploy/nginx/sdk-versioned.conf.in")
        .replace(
            "@SDK_RELEASES@",
            &repo().join("sdk/releases").display().to_string(),
        )
        .replace(
            "@SDK_HEADERS@",
            &repo()
                .join("deploy/nginx/sdk-headers.conf")
                .display()
                .to_string(),
        );
    std::fs::write(dir.join("sdk-versioned.conf"), versioned).expect("written");
    server = server.replace(
        "/etc/nginx/sdk-versioned*.conf",
        &dir.join("sdk-versioned*.conf").display().to_string(),
    );
    format!(
        "pid {0}/{file}.pid;\nerror_log {0}/error.log;\nevents {{}}\nhttp {{\n{server}\n}}\n",
        dir.display()
    )
}

#[test]
fn every_nginx_front_passes_nginx_t() {
    let dir = tempfile::tempdir().expect("folder");
    // docker-compose's front, and the SDK's own server of the Dockerfile's `sdk` image.
    for file in ["compose.conf", "sdk.conf"] {
        nginx_check(file, &container_nginx(file, dir.path()));
    }
    // The front image serves the SDK's versioned path too (nginx -T shows what it loads).
    let conf = dir.path().join("front.conf");
    std::fs::write(&conf, container_nginx("compose.conf", dir.path())).expect("written");
    let dump = std::process::Command::new("nginx")
        .arg("-T")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("nginx runs");
    let dump = String::from_utf8_lossy(&dump.stdout);
    let versioned = read("deploy/nginx/sdk-versioned.conf.in");
    let location = versioned
        .lines()
        .find(|l| l.starts_with("location "))
        .expect("a location");
    assert!(
        dump.contains(location),
        "the front misses the SDK's versioned path ({location})"
    );
    // scripts/up's front (which creates its temp folder first, as scripts/up does).
    std::fs::create_dir_all(dir.path().join("tmp")).expect("folder");
    let local = e2e::render_front(
        dir.path(),
        "127.0.0.1:8080",
        "127.0.0.1:8081",
        "127.0.0.1:8082",
    );
    nginx_check("local.conf", &local);
}

/// docker-compose's front follows a recreated service to its new address: Docker's DNS,
/// asked again, for every upstream server, in a zone shared by the workers (without
/// `resolve`, nginx 1.27.5 keeps the address it read at start until it restarts).
#[test]
fn the_compose_front_re_resolves_its_upstreams() {
    let conf = read("deploy/nginx/compose.conf");
    let lines: Vec<&str> = conf.lines().map(str::trim).collect();
    assert!(
        lines.contains(&"resolver 127.0.0.11 valid=10s ipv6=off;"),
        "compose.conf asks no resolver, or not Docker's"
    );
    let dockerfile = read("Dockerfile");
    let image = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("FROM nginxinc/nginx-unprivileged:"))
        .expect("the front's nginx image");
    let version: Vec<u32> = image
        .split(['-', ' '])
        .next()
        .expect("a tag")
        .split('.')
        .map(|n| n.parse().expect("a version number"))
        .collect();
    assert!(
        version >= vec![1, 27, 3],
        "nginx {image} has no upstream `resolve`"
    );
    let mut upstreams = 0;
    for (at, line) in lines.iter().enumerate() {
        let Some(name) = line
            .strip_prefix("upstream ")
            .and_then(|l| l.strip_suffix(" {"))
        else {
            continue;
        };
        let end = at + lines[at..].iter().position(|l| *l == "}").expect("closed");
        let body = &lines[at + 1..end];
        let servers: Vec<&&str> = body.iter().filter(|l| l.starts_with("server ")).collect();
        assert!(!servers.is_empty(), "upstream {name} has no server");
        for server in servers {
            assert!(
                server.ends_with(" resolve;"),
                "upstream {name}: `{server}` is resolved once, at start"
            );
        }
        assert!(
            body.iter().any(|l| l.starts_with("zone ")),
            "upstream {name} has no shared zone (`resolve` needs one)"
        );
        upstreams += 1;
    }
    assert_eq!(upstreams, 2, "the ingest's and the config-api's");
}

/// The versions released so far (`sdk/releases/<version>/`), at least two.
fn releases() -> Vec<String> {
    let mut versions: Vec<String> = std::fs::read_dir(repo().join("sdk/releases"))
        .expect("sdk/releases")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    versions.sort();
    assert!(versions.len() >= 2, "{versions:?}");
    versions
}

/// Every released version's files at `/sdk/v<version>/`, immutable, side by side; a version
/// never released answers 404.
async fn serves_every_release(base: &str) {
    let http = reqwest::Client::new();
    for version in releases() {
        for file in ["split.min.js", "split-autotrack.min.js"] {
            let url = format!("{base}/sdk/v{version}/{file}");
            let answer = http.get(&url).send().await.expect("the front answers");
            assert_eq!(answer.status(), 200, "{url}");
            assert_eq!(
                answer.headers()["cache-control"],
                "public, max-age=31536000, immutable",
                "{url}"
            );
            let want = std::fs::read(repo().join(format!("sdk/releases/{version}/{file}")))
                .expect("release file");
            assert_eq!(answer.bytes().await.expect("body"), want, "{url}");
        }
    }
    let missing = format!("{base}/sdk/v9.9.9/split.min.js");
    let answer = http.get(&missing).send().await.expect("the front answers");
    assert_eq!(answer.status(), 404, "{missing}");
}

/// scripts/up's front and the SDK image's own nginx (its files where the Dockerfile puts
/// them) serve each released version at its immutable path.
#[tokio::test]
async fn the_fronts_serve_every_released_sdk_version_side_by_side() {
    // Upstreams that nothing answers: only the SDK's paths are read.
    let nowhere: std::net::SocketAddr = "127.0.0.1:9".parse().expect("address");
    let front = e2e::Front::start(nowhere, nowhere).await;
    serves_every_release(&front.url()).await;

    let dir = tempfile::tempdir().expect("folder");
    let port = e2e::free_port();
    let sdk = repo().join("sdk");
    let conf = container_nginx("sdk.conf", dir.path())
        .replace("listen 8080;", &format!("listen 127.0.0.1:{port};"))
        .replace("/var/log/nginx/", &format!("{}/", dir.path().display()))
        .replace(
            "/usr/share/nginx/sdk/releases/",
            &format!("{}/", sdk.join("releases").display()),
        );
    let path = dir.path().join("sdk.conf");
    std::fs::write(&path, conf).expect("written");
    let nginx = |args: &[&str]| {
        let mut command = std::process::Command::new("nginx");
        command
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&path)
            .args(args);
        command.stdout(std::process::Stdio::null());
        command.stderr(std::process::Stdio::null());
        command
    };
    /// Stops the server (master and workers) when the test ends, passed or not.
    struct Stop(std::process::Command, std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.status();
            let _ = self.1.wait();
        }
    }
    let _server = Stop(
        nginx(&["-s", "stop"]),
        nginx(&["-g", "daemon off;"]).spawn().expect("nginx starts"),
    );
    let base = format!("http://127.0.0.1:{port}");
    e2e::eventually(
        std::time::Duration::from_secs(10),
        "the image's nginx",
        || async {
            reqwest::get(format!("{base}/healthz"))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    serves_every_release(&base).await;
}

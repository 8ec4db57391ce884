//! The nginx fronts pass `nginx -t`.

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
    let mut server = read(&format!("deploy/nginx/{file}"))
        .replace("ingest:8081", "127.0.0.1:8081")
        .replace("config-api:8082", "127.0.0.1:8082");
    for include in ["routes.conf", "sdk-headers.conf"] {
        let path = repo().join("deploy/nginx").join(include);
        server = server.replace(
            &format!("/etc/nginx/{include}"),
            &path.display().to_string(),
        );
    }
    // Rendered into the front image by the Dockerfile, the same way.
    let versioned = read("deploy/nginx/sdk-versioned.conf.in")
        .replace("@SDK_DIST@", &repo().join("sdk/dist").display().to_string())
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
        .find(|l| l.starts_with("location = "))
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

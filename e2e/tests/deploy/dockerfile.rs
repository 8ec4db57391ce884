//! The Dockerfile: what it copies exists, what it builds, a non-root front, labelled images.

use super::*;

/// What the Dockerfile copies from the repository exists, and its last stage, the one a
/// plain `docker build` makes, is the services' image.
#[test]
fn the_dockerfile_copies_what_exists_and_builds_the_services_by_default() {
    let dockerfile = read("Dockerfile");
    let mut stages = Vec::new();
    for line in dockerfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first() {
            Some(&"FROM") => stages.push(words.last().copied().unwrap_or_default()),
            Some(&"COPY") if !line.contains("--from=") => {
                // Sources, then the destination; `.` is the whole context.
                for source in &words[1..words.len() - 1] {
                    let source = source.trim_end_matches('\\');
                    if !source.is_empty() && !source.starts_with("--") {
                        assert!(repo().join(source).exists(), "COPY {source}: no such file");
                    }
                }
            }
            _ => {}
        }
    }
    assert!(stages.contains(&"sdk"), "no sdk stage: {stages:?}");
    assert_eq!(stages.last(), Some(&"runtime"), "{stages:?}");
}

/// The images an operator runs: the services (default), the tools with the four commands
/// (no cargo needed), the front and the SDK on a non-root nginx; each with OCI labels; the
/// SDK built on a supported Node (22 LTS).
#[test]
fn the_dockerfile_builds_the_tools_a_non_root_front_and_labelled_images() {
    let dockerfile = read("Dockerfile");
    // Stage name → its lines (continuations joined).
    let mut stages: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    let mut current = String::new();
    let joined = dockerfile.replace("\\\n", " ");
    for line in joined.lines().map(str::trim) {
        if let Some(from) = line.strip_prefix("FROM ") {
            let words: Vec<&str> = from.split_whitespace().collect();
            current = words.last().copied().unwrap_or_default().to_owned();
            stages.insert(current.clone(), (words[0].to_owned(), vec![]));
        } else if let Some((_, lines)) = stages.get_mut(&current) {
            lines.push(line.to_owned());
        }
    }
    let stage = |name: &str| {
        stages
            .get(name)
            .unwrap_or_else(|| panic!("no stage {name}: {:?}", stages.keys()))
    };
    assert!(
        stage("sdk-build").0.starts_with("node:22"),
        "{}",
        stage("sdk-build").0
    );
    assert!(
        stage("sdk").0.starts_with("nginxinc/nginx-unprivileged:"),
        "{}",
        stage("sdk").0
    );
    assert_eq!(stage("front").0, "sdk", "the front is the SDK's nginx");
    let text = |name: &str| stage(name).1.join("\n");
    assert!(text("front").contains("routes.conf /etc/nginx/routes.conf"));
    for tool in [
        "experiment-results",
        "analytics-access",
        "analytics-erase",
        "dlq-replay",
    ] {
        assert!(
            text("builder").contains(&format!("--bin {tool}")),
            "{tool} is not built"
        );
        assert!(
            text("tools").contains(&format!("/src/target/dist/{tool}")),
            "{tool} is not in the tools image"
        );
    }
    for name in ["runtime", "tools"] {
        assert!(text(name).contains("USER 10001"), "{name} runs as root");
    }
    for name in ["runtime", "tools", "sdk", "front"] {
        for label in [
            "org.opencontainers.image.title",
            "org.opencontainers.image.description",
        ] {
            assert!(text(name).contains(label), "{name}: no {label}");
        }
    }
    for name in ["runtime", "tools", "sdk"] {
        for label in [
            "org.opencontainers.image.version",
            "org.opencontainers.image.licenses",
        ] {
            assert!(text(name).contains(label), "{name}: no {label}");
        }
    }
}

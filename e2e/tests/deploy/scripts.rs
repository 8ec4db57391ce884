//! The scripts: they parse, are executable, answer `--help` and refuse unknown options touching nothing.

use super::*;

#[test]
fn scripts_parse_and_are_executable() {
    use std::os::unix::fs::PermissionsExt;
    for name in ["up", "down", "test", "bench", "chaos", "lib.sh"] {
        let path = repo().join("scripts").join(name);
        let mut command = std::process::Command::new("bash");
        command.arg("-n").arg(&path);
        assert_accepts(command, "bash -n", &format!("scripts/{name}"));
        let mode = std::fs::metadata(&path)
            .expect("script")
            .permissions()
            .mode();
        assert!(
            name.ends_with(".sh") || mode & 0o111 != 0,
            "scripts/{name} is not executable"
        );
    }
}

/// Every script answers `--help` (and `-h`) with its usage and exit 0, and refuses an
/// unknown option with exit 2, touching nothing either way: it runs with a PATH that holds
/// only bash, dirname and sed and a HOME of its own, so any command it tried to run
/// (mkdir, cargo, nginx, kill, apt-get...) would fail it.
#[test]
fn every_script_answers_help_and_refuses_unknown_options_touching_nothing() {
    let bare = tempfile::tempdir().expect("temporary folder");
    let bin = bare.path().join("bin");
    std::fs::create_dir(&bin).expect("folder");
    for tool in ["bash", "dirname", "sed"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|dir| Path::new(dir).join(tool))
            .find(|path| path.exists())
            .unwrap_or_else(|| panic!("{tool} not found"));
        std::os::unix::fs::symlink(found, bin.join(tool)).expect("symlink");
    }
    let run = |script: &Path, arg: &str| {
        std::process::Command::new(bin.join("bash"))
            .arg(script)
            .arg(arg)
            .env_clear()
            .env("PATH", &bin)
            .env("HOME", bare.path())
            .output()
            .expect("bash runs")
    };
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(repo().join("scripts"))
        .expect("scripts/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_none())
        .collect();
    scripts.sort();
    assert!(scripts.len() >= 5, "{scripts:?}");
    for script in &scripts {
        let name = script.file_name().expect("name").to_string_lossy();
        for help in ["--help", "-h"] {
            let output = run(script, help);
            let usage = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success() && usage.lines().count() >= 2,
                "scripts/{name} {help}: exit {:?}, usage {usage:?}, errors {}",
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let output = run(script, "--no-such-option");
        assert_eq!(
            output.status.code(),
            Some(2),
            "scripts/{name} --no-such-option: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("--help"),
            "scripts/{name}: the refusal points to --help"
        );
    }
}

/// `unset_empty` (scripts/lib.sh, for scripts/bench and scripts/bench-results): an empty
/// setting is unset before devtool reads it (clap refuses an empty number), a set one is
/// kept, and a name never set stays unset.
#[test]
fn an_empty_setting_counts_as_unset() {
    let script = format!(
        "source {} && unset_empty BENCH_SECONDS BENCH_ROUNDS BENCH_NEVER && \
         echo \"${{BENCH_SECONDS-unset}} ${{BENCH_ROUNDS-unset}} ${{BENCH_NEVER-unset}}\"",
        repo_script("lib.sh")
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .env("BENCH_SECONDS", "")
        .env("BENCH_ROUNDS", "3")
        .env_remove("BENCH_NEVER")
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "unset 3 unset");
}

/// `use_build_cache` (scripts/lib.sh, for scripts/test): a clean checkout's target/ links
/// to the cache and the run's pid marks it taken; while that run lives another checkout
/// builds in a target/ of its own; a checkout with a target/ keeps it; `off` turns it off.
#[test]
fn a_clean_checkout_builds_in_the_cache_one_run_at_a_time() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let cache = dir.path().join("cache/target");
    let checkout = |name: &str| {
        let repo = dir.path().join(name);
        std::fs::create_dir(&repo).expect("folder");
        repo
    };
    // Runs use_build_cache in `repo` as a run of pid `$$`, then prints $BUILD_CACHE_PID.
    let use_cache = |repo: &Path, setting: &Path| {
        let script = format!(
            "source {} && REPO={} && BUILD_CACHE_PID= && use_build_cache && \
             echo \"$BUILD_CACHE_PID\"",
            repo_script("lib.sh"),
            repo.display()
        );
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .env("SPLIT_BUILD_CACHE", setting)
            .output()
            .expect("bash runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let first = checkout("first");
    let pid_file = use_cache(&first, &cache);
    assert_eq!(pid_file, format!("{}.pid", cache.display()));
    assert_eq!(
        std::fs::read_link(first.join("target")).expect("a link"),
        cache
    );
    // The run that took it has ended: its pid is stale, so the next one takes it.
    let second = checkout("second");
    use_cache(&second, &cache);
    assert_eq!(
        std::fs::read_link(second.join("target")).expect("a link"),
        cache
    );
    // A live run holds it: another checkout builds on its own.
    std::fs::write(&pid_file, std::process::id().to_string()).expect("written");
    let third = checkout("third");
    assert_eq!(use_cache(&third, &cache), "");
    assert!(
        !third.join("target").exists(),
        "a target/ of its own, made by cargo"
    );
    // A checkout with a target/, and the setting `off`: nothing changes.
    let own = checkout("own");
    std::fs::create_dir(own.join("target")).expect("folder");
    std::fs::remove_file(&pid_file).expect("removed");
    assert_eq!(use_cache(&own, &cache), "");
    assert!(own.join("target").is_dir() && !own.join("target").is_symlink());
    let off = checkout("off");
    assert_eq!(use_cache(&off, Path::new("off")), "");
    assert!(!off.join("target").exists());
}

fn repo_script(name: &str) -> String {
    repo().join("scripts").join(name).display().to_string()
}

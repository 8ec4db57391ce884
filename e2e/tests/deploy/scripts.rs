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

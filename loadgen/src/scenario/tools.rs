//! The commands that measure no load: a process's peak memory, the peers' documents, the
//! report of the figures, and the chaos and demo clients.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;

use super::peak_rss_kib;
use crate::cli::{HalfRateArgs, RssArgs};
use crate::stats::Figure;
use crate::{chaos, peers, report};

pub fn rss(args: RssArgs) -> anyhow::Result<Figure> {
    Ok(Figure {
        rss_kib: Some(peak_rss_kib(args.pid)?),
        ..args.label.figure("KiB", 0.0, 0, BTreeMap::new())
    })
}

pub fn unleash_features(answer: &Path) -> anyhow::Result<()> {
    let bytes =
        std::fs::read(answer).with_context(|| format!("cannot read {}", answer.display()))?;
    let answer: serde_json::Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not JSON", answer.display()))?;
    println!("{}", peers::unleash_features(&answer)?);
    Ok(())
}

/// The figures of a file of JSON lines.
fn figures(file: &Path) -> anyhow::Result<Vec<Figure>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<Vec<Figure>, _>>()
        .with_context(|| format!("{} is not a file of figures", file.display()))
}

pub fn report(file: &Path) -> anyhow::Result<()> {
    print!("{}", report::render(&figures(file)?));
    Ok(())
}

pub fn latencies(file: &Path) -> anyhow::Result<()> {
    print!("{}", report::latencies(&figures(file)?));
    Ok(())
}

pub fn half_rate(args: &HalfRateArgs) -> anyhow::Result<()> {
    let rate = report::half_request_rate(
        &figures(&args.file)?,
        &args.bench,
        &args.subject,
        args.seconds,
    )
    .with_context(|| format!("no round of {} in {}", args.subject, args.bench))?;
    println!("{rate}");
    Ok(())
}

/// The first key's `publicKey` of a snapshot file.
pub fn snapshot_key(path: &Path) -> anyhow::Result<()> {
    println!("{}", first_public_key(path)?);
    Ok(())
}

fn first_public_key(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let snapshot: serde_json::Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    let key = snapshot["keys"][0]["publicKey"]
        .as_str()
        .with_context(|| format!("no public key in {}", path.display()))?;
    Ok(key.to_owned())
}

/// Whether the chaos run held: no acknowledged event lost or duplicated.
pub async fn chaos(args: chaos::ChaosArgs) -> anyhow::Result<bool> {
    chaos::run(args).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_public_key_of_a_snapshot_or_an_error() {
        let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/experiments.json");
        assert_eq!(first_public_key(&demo).unwrap(), "pk_demo_coffee");
        let dir = tempfile::tempdir().unwrap();
        let keyless = dir.path().join("keyless.json");
        std::fs::write(&keyless, r#"{"version": 1, "experiments": [], "keys": []}"#).unwrap();
        let error = first_public_key(&keyless).unwrap_err().to_string();
        assert!(error.starts_with("no public key in"), "{error}");
    }
}

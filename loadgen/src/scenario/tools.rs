//! The commands that measure no load: a process's peak memory, the peers' documents, the
//! report of the figures, and the chaos and demo clients.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;

use super::peak_rss_kib;
use crate::cli::RssArgs;
use crate::{chaos, peers};
use loadgen::stats::Figure;

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

//! The commands that measure no load: a process's peak memory, the peers' documents, the
//! report of the figures, and the chaos and demo clients.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;

use super::peak_rss_kib;
use crate::cli::RssArgs;
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

pub fn report(file: &Path) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let figures = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<Vec<Figure>, _>>()
        .context("not a file of figures")?;
    print!("{}", report::render(&figures));
    Ok(())
}

/// Exits 1 when the chaos run lost or duplicated an acknowledged event.
pub async fn chaos(args: chaos::ChaosArgs) -> anyhow::Result<()> {
    if !chaos::run(args).await? {
        std::process::exit(1);
    }
    Ok(())
}

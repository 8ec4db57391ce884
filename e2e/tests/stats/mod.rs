//! Shared by the statistics tests: the independent reference (`reference.py`: scipy,
//! statsmodels and GrowthBook's gbstats, in the virtual environment `scripts/test`
//! installs), the comparison to 1e-9, and deterministic randomness (a seeded SplitMix64
//! and the SDK's MurmurHash3 bucketing).

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

/// The reference's Python: `TEST_STATS_PYTHON`, default where `ensure_stats_python` puts it.
fn python() -> PathBuf {
    std::env::var_os("TEST_STATS_PYTHON").map_or_else(
        || {
            let home = std::env::var_os("HOME").expect("HOME");
            PathBuf::from(home).join(
                ".local/share/stats-reference-gbstats-0.8.0-scipy-1.17.1-statsmodels-0.15.0/bin/python",
            )
        },
        PathBuf::from,
    )
}

/// The reference's answers to `request` (see `reference.py` for the shape).
pub fn reference(request: &Value) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/stats/reference.py");
    let mut child = Command::new(python())
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{} cannot run ({e}): run scripts/lib.sh's ensure_stats_python, or set \
                 TEST_STATS_PYTHON",
                python().display()
            )
        });
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(request.to_string().as_bytes())
        .expect("request written");
    let output = child.wait_with_output().expect("reference runs");
    assert!(
        output.status.success(),
        "reference.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON answers")
}

/// Equal to 1e-9 relative, or 1e-12 absolute.
pub fn close(got: f64, want: f64) -> bool {
    got == want || (got - want).abs() <= 1e-9 * want.abs() || (got - want).abs() <= 1e-12
}

#[track_caller]
pub fn assert_close(what: &str, got: f64, want: &Value) {
    let want = want
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: the reference has no number: {want}"));
    assert!(close(got, want), "{what}: got {got:e}, reference {want:e}");
}

/// SplitMix64: a seeded generator, enough for simulations (no dependency).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in lo..=hi.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    pub fn bernoulli(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// Poisson by inversion (small means).
    pub fn poisson(&mut self, mean: f64) -> u64 {
        let (mut k, mut p, limit) = (0, 1.0, (-mean).exp());
        loop {
            p *= self.uniform();
            if p <= limit {
                return k;
            }
            k += 1;
        }
    }
}

/// MurmurHash3 x86 32-bit, as the SDK's `sdk/src/assign.ts` buckets visitors.
pub fn murmur3(text: &str, seed: u32) -> u32 {
    let bytes = text.as_bytes();
    let (c1, c2) = (0xcc9e_2d51_u32, 0x1b87_3593_u32);
    let mut h = seed;
    let chunks = bytes.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(c1).rotate_left(15).wrapping_mul(c2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    if !tail.is_empty() {
        let mut k = 0u32;
        for (i, b) in tail.iter().enumerate() {
            k ^= u32::from(*b) << (8 * i);
        }
        k = k.wrapping_mul(c1).rotate_left(15).wrapping_mul(c2);
        h ^= k;
    }
    h ^= bytes.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The SDK's bucket of a visitor in an experiment, in [0, 1).
pub fn bucket(experiment: &str, visitor: &str) -> f64 {
    f64::from(murmur3(&format!("{experiment}:{visitor}"), 0)) / 4_294_967_296.0
}

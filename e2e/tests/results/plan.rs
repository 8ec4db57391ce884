//! `experiment-results plan`, the built binary: its fixed-horizon sizes against statsmodels
//! (the same pooled design, `samplesize_proportions_2indep_onetail`, and its power at the
//! rounded size with `power_proportions_2indep`), its always-valid and fixed-horizon sizes
//! against simulated experiments (Bernoulli visitors at the planned size and the true
//! effect, read with the view's rule at the planned looks: the share that ends significant
//! is the power within its binomial band), and its refusals of bad input.

use crate::stats;

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use stats::Rng;

/// The view's default N*.
const TUNING: f64 = 5000.0;

fn run_plan(args: &[&str]) -> Output {
    Command::new(e2e::workspace_binary("experiment-results"))
        .arg("plan")
        .args(args)
        // A refusal is one sentence even where backtraces are asked for.
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("experiment-results runs")
}

/// The plan as JSON.
fn plan(args: &[&str]) -> Value {
    let output = run_plan(&[args, &["--json"]].concat());
    assert!(
        output.status.success(),
        "plan {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

/// statsmodels' answers (`TEST_STATS_PYTHON`, the reference's environment that
/// `scripts/test` installs) for each comparison: the pooled design's treatment visitors,
/// its power at given visitors, and the arcsine (Cohen's h) design's, for the record.
fn statsmodels(cases: &Value) -> Value {
    const SCRIPT: &str = r#"
import json, sys
from statsmodels.stats.power import NormalIndPower
from statsmodels.stats.proportion import (
    power_proportions_2indep, proportion_effectsize, samplesize_proportions_2indep_onetail)
out = []
for c in json.load(sys.stdin):
    p0, p1, alpha, power = c["control"], c["treatment"], c["alpha"], c["power"]
    diff = p1 - p0
    out.append({
        "nobs1": samplesize_proportions_2indep_onetail(
            diff, p0, power, ratio=c["ratio"], alpha=alpha),
        "power": [power_proportions_2indep(
            diff, p0, n1, ratio=n0 / n1, alpha=alpha, return_results=False)
            for n1, n0 in c["sizes"]],
        "cohen_h_nobs1": NormalIndPower().solve_power(
            effect_size=proportion_effectsize(p1, p0), alpha=alpha, power=power,
            ratio=c["ratio"]),
    })
print(json.dumps(out))
"#;
    let python = std::env::var_os("TEST_STATS_PYTHON")
        .expect("TEST_STATS_PYTHON: the statistics reference's Python (scripts/test sets it)");
    let mut child = Command::new(python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the reference's Python runs");
    std::io::Write::write_all(
        &mut child.stdin.take().expect("stdin"),
        cases.to_string().as_bytes(),
    )
    .expect("cases written");
    let output = child.wait_with_output().expect("statsmodels answers");
    assert!(
        output.status.success(),
        "statsmodels: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

#[test]
fn plan_fixed_horizon_matches_statsmodels() {
    // (rate, mde, weights, alpha, power): even and ramped splits both ways, a decrease, a
    // relative mde, rare and common rates, two and three treatments.
    let designs: [(&str, &str, &str, &str, &str); 9] = [
        ("0.10", "0.02", "50,50", "0.05", "0.8"),
        ("0.05", "10%", "50,50", "0.05", "0.9"),
        ("0.01", "0.002", "50,50", "0.05", "0.8"),
        ("0.10", "0.02", "10,90", "0.05", "0.8"),
        ("0.10", "0.02", "90,10", "0.05", "0.8"),
        ("0.02", "-0.004", "20,80", "0.01", "0.8"),
        ("0.50", "0.05", "30,70", "0.10", "0.95"),
        ("0.30", "0.03", "34,33,33", "0.05", "0.8"),
        ("0.04", "25%", "40,40,20", "0.05", "0.8"),
    ];
    let mut cases = Vec::new();
    let mut planned = Vec::new();
    for (rate, mde, weights, alpha, power) in designs {
        let p = plan(&[
            "--baseline-rate",
            rate,
            "--mde",
            mde,
            "--weights",
            weights,
            "--alpha",
            alpha,
            "--power",
            power,
        ]);
        let d = &p["design"];
        let w = numbers(&d["weights"]);
        let fixed = &p["fixed_horizon"];
        let exact = numbers(&fixed["exact_per_variant"]);
        let sizes = numbers(&fixed["per_variant"]);
        let decides = fixed["deciding_variant"].as_u64().expect("index") as usize;
        assert_eq!(
            p["alpha_per_treatment"].as_f64(),
            d["alpha"].as_f64().map(|a| a / (w.len() - 1) as f64),
            "{weights}: alpha split across the treatments"
        );
        cases.push(json!({
            "control": d["baseline_rate"],
            "treatment": d["treatment_rate"],
            "alpha": p["alpha_per_treatment"],
            "power": d["power"],
            "ratio": w[0] / w[decides],
            // Each treatment's rounded size with the control's, then the deciding one's
            // exact size a visitor short, the split kept.
            "sizes": (1..w.len())
                .map(|i| json!([sizes[i], sizes[0]]))
                .chain([json!([exact[decides] - 1.0, exact[0] * (exact[decides] - 1.0) / exact[decides]])])
                .collect::<Vec<_>>(),
        }));
        planned.push((
            designs_label(rate, mde, weights, alpha, power),
            exact,
            sizes,
            decides,
        ));
    }
    let answers = statsmodels(&Value::Array(cases));
    for (((label, exact, sizes, decides), answer), (.., power)) in planned
        .iter()
        .zip(answers.as_array().expect("answers"))
        .zip(designs)
    {
        let nobs1 = answer["nobs1"].as_f64().expect("nobs1");
        let powers = numbers(&answer["power"]);
        let want_power: f64 = power.parse().expect("a power");
        println!(
            "{label}: ours {:.2} per treatment ({} rounded), statsmodels {nobs1:.2}; its power at \
             ours {:.4}; arcsine design (NormalIndPower) {:.2}",
            exact[*decides],
            sizes[*decides],
            powers[decides - 1],
            answer["cohen_h_nobs1"].as_f64().unwrap_or(f64::NAN),
        );
        assert!(
            (exact[*decides] - nobs1).abs() <= 1e-6 * nobs1,
            "{label}: {} against statsmodels' {nobs1}",
            exact[*decides]
        );
        assert_eq!(sizes[*decides], nobs1.ceil(), "{label}: rounded up");
        let (each, short) = powers.split_at(powers.len() - 1);
        for (i, p) in each.iter().enumerate() {
            assert!(
                *p >= want_power,
                "{label}: treatment {} has power {p}",
                i + 1
            );
        }
        assert!(
            short[0] < want_power,
            "{label}: a visitor fewer still has power {}",
            short[0]
        );
    }
}

fn designs_label(rate: &str, mde: &str, weights: &str, alpha: &str, power: &str) -> String {
    format!("rate {rate}, mde {mde}, weights {weights}, alpha {alpha}, power {power}")
}

/// The view's always-valid p-value of a variant against the control (migration 11: the
/// mixture tuned at 5% shared across the `treatments`, the p-value multiplied by them), or
/// `None` where the view gives none (the guard, or an arm without variance).
fn always_valid_p(treatments: u32, [n1, x1, n0, x0]: [u64; 4]) -> Option<f64> {
    let enough = n1 >= 50 && n0 >= 50 && x1 + x0 >= 5 && n1 + n0 - x1 - x0 >= 5;
    let variances = x1 > 0 && x1 < n1 && x0 > 0 && x0 < n0;
    if !(enough && variances) {
        return None;
    }
    let (r1, r0) = (x1 as f64 / n1 as f64, x0 as f64 / n0 as f64);
    let unpooled = (r1 * (1.0 - r1) / n1 as f64 + r0 * (1.0 - r0) / n0 as f64).sqrt();
    let pooled = (x1 + x0) as f64 / (n1 + n0) as f64;
    let se_null = (pooled * (1.0 - pooled) * (1.0 / n1 as f64 + 1.0 / n0 as f64)).sqrt();
    // The larger of the two, as the view has it.
    let se = unpooled.max(se_null);
    let family = f64::from(treatments);
    let bound = 5.991_464_547_107_982 + 2.0 * family.ln();
    let v = (n1 + n0) as f64 * (bound + (bound + 1.0).ln()) / TUNING;
    let z = (r1 - r0) / se;
    Some((family * (1.0 + v).sqrt() * (-z * z / 2.0 * v / (1.0 + v)).exp()).min(1.0))
}

/// The view's fixed-horizon p-value: the pooled z-test, two-sided.
fn pooled_p(n1: u64, x1: u64, n0: u64, x0: u64) -> f64 {
    let (r1, r0) = (x1 as f64 / n1 as f64, x0 as f64 / n0 as f64);
    let pooled = (x1 + x0) as f64 / (n1 + n0) as f64;
    let se = (pooled * (1.0 - pooled) * (1.0 / n1 as f64 + 1.0 / n0 as f64)).sqrt();
    statrs::function::erf::erfc(((r1 - r0) / se).abs() / std::f64::consts::SQRT_2)
}

/// Simulated experiments at a plan's sizes: each variant's planned visitors arrive in
/// `looks` equal steps; the share of experiments in which treatment 1 is significant (the
/// view's always-valid p, adjusted for the treatments, below α at some look; the
/// fixed-horizon p below α per treatment at the end).
fn simulate(p: &Value, runs: u32, seed: u64) -> (f64, f64) {
    let d = &p["design"];
    let rates = [
        d["baseline_rate"].as_f64().expect("rate"),
        d["treatment_rate"].as_f64().expect("rate"),
    ];
    let alpha = p["alpha_per_treatment"].as_f64().expect("alpha");
    let family_alpha = d["alpha"].as_f64().expect("alpha");
    let treatments = numbers(&d["weights"]).len() as u32 - 1;
    let looks = d["looks"].as_u64().expect("looks");
    let sizes = |design: &str| -> [u64; 2] {
        let n = numbers(&p[design]["per_variant"]);
        [n[0] as u64, n[1] as u64]
    };
    // A stream per design, so that each share depends on its own sizes only.
    let (mut rng, mut fixed_rng) = (Rng::new(seed), Rng::new(seed ^ 0x5eed));
    let (mut always_valid, mut fixed) = (0, 0);
    for _ in 0..runs {
        // Always valid: the looks up to the planned size.
        let n = sizes("always_valid");
        let (mut seen, mut converted) = ([0u64; 2], [0u64; 2]);
        for j in 1..=looks {
            for arm in 0..2 {
                let to = (n[arm] * j).div_ceil(looks);
                while seen[arm] < to {
                    seen[arm] += 1;
                    converted[arm] += u64::from(rng.bernoulli(rates[arm]));
                }
            }
            let p = always_valid_p(treatments, [seen[1], converted[1], seen[0], converted[0]]);
            if p.is_some_and(|p| p < family_alpha) {
                always_valid += 1;
                break;
            }
        }
        // Fixed horizon: once, at its planned size.
        let n = sizes("fixed_horizon");
        let x: Vec<u64> = (0..2)
            .map(|arm| {
                (0..n[arm])
                    .map(|_| u64::from(fixed_rng.bernoulli(rates[arm])))
                    .sum()
            })
            .collect();
        if pooled_p(n[1], x[1], n[0], x[0]) < alpha {
            fixed += 1;
        }
    }
    (
        f64::from(always_valid) / f64::from(runs),
        f64::from(fixed) / f64::from(runs),
    )
}

#[test]
fn plan_sizes_reach_their_power_in_simulation() {
    // 10,000 experiments per design (about 4 s): the 3-sd binomial band of 0.8 is ±0.012.
    const RUNS: u32 = 10000;
    let designs: [&[&str]; 4] = [
        &["--baseline-rate", "0.10", "--mde", "0.02"],
        &[
            "--baseline-rate",
            "0.10",
            "--mde",
            "0.02",
            "--weights",
            "10,90",
        ],
        &[
            "--baseline-rate",
            "0.05",
            "--mde",
            "30%",
            "--weights",
            "34,33,33",
        ],
        &[
            "--baseline-rate",
            "0.20",
            "--mde",
            "-0.03",
            "--weights",
            "80,20",
            "--looks",
            "500",
        ],
    ];
    let band = 3.0 * (0.8_f64 * 0.2 / f64::from(RUNS)).sqrt();
    let mut failures = Vec::new();
    for (i, args) in designs.iter().enumerate() {
        let p = plan(args);
        let (always_valid, fixed) = simulate(&p, RUNS, 41 + i as u64);
        println!(
            "{args:?}: always valid {:?} per variant, {} looks: simulated power {always_valid:.3}; \
             fixed horizon {:?}: {fixed:.3} (band 0.8 ± {band:.3})",
            p["always_valid"]["per_variant"],
            p["design"]["looks"],
            p["fixed_horizon"]["per_variant"]
        );
        for (what, share) in [("always valid", always_valid), ("fixed horizon", fixed)] {
            if (share - 0.8).abs() > band {
                failures.push(format!("{args:?}, {what}: {share}"));
            }
        }
    }
    assert!(failures.is_empty(), "outside 0.8 ± {band:.3}: {failures:?}");
}

#[test]
fn plan_refuses_bad_input_in_one_sentence() {
    let cases: [(&[&str], &str); 12] = [
        (
            &["--baseline-rate", "0", "--mde", "0.01"],
            "--baseline-rate must be between 0 and 1",
        ),
        (
            &["--baseline-rate", "1.2", "--mde", "0.01"],
            "--baseline-rate must be between 0 and 1",
        ),
        (
            &["--baseline-rate", "-0.1", "--mde", "0.01"],
            "--baseline-rate must be between 0 and 1",
        ),
        (
            &["--baseline-rate", "0.995", "--mde", "0.01"],
            "the baseline rate plus --mde",
        ),
        (
            &["--baseline-rate", "0.01", "--mde", "-0.02"],
            "the baseline rate plus --mde",
        ),
        (
            &["--baseline-rate", "0.1", "--mde", "0"],
            "--mde must not be 0",
        ),
        (
            &[
                "--baseline-rate",
                "0.1",
                "--mde",
                "0.01",
                "--weights",
                "50,0",
            ],
            "every weight must be a positive",
        ),
        (
            &[
                "--baseline-rate",
                "0.1",
                "--mde",
                "0.01",
                "--weights",
                "-10,90",
            ],
            "every weight must be a positive",
        ),
        (
            &[
                "--baseline-rate",
                "0.1",
                "--mde",
                "0.01",
                "--weights",
                "100",
            ],
            "--weights needs",
        ),
        (
            &["--baseline-rate", "0.1", "--mde", "0.01", "--alpha", "1.5"],
            "--alpha must be between 0 and 1",
        ),
        (
            &["--baseline-rate", "0.1", "--mde", "0.01", "--power", "1"],
            "--power must be between 0 and 1",
        ),
        (
            &["--baseline-rate", "0.1", "--mde", "0.01", "--power", "-0.8"],
            "--power must be between 0 and 1",
        ),
    ];
    for (args, said) in cases {
        let output = run_plan(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}: printed a plan");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {stderr}"
        );
        assert!(
            stderr.contains(said),
            "{args:?}: {stderr:?} does not say {said:?}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // What is not a number at all is clap's refusal, naming the argument.
    for args in [
        &["--baseline-rate", "ten", "--mde", "0.01"][..],
        &["--baseline-rate", "0.1", "--mde", "five%"],
        &[
            "--baseline-rate",
            "0.1",
            "--mde",
            "0.01",
            "--weights",
            "50,x",
        ],
    ] {
        let output = run_plan(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: invalid value"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn plan_prints_a_table_by_default() {
    let output = run_plan(&[
        "--baseline-rate",
        "0.1",
        "--mde",
        "0.02",
        "--weights",
        "10,90",
    ]);
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{table}");
    println!("{table}");
    let row = |name: &str| -> Vec<u64> {
        let line = table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {table}"));
        line.split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect()
    };
    let p = plan(&[
        "--baseline-rate",
        "0.1",
        "--mde",
        "0.02",
        "--weights",
        "10,90",
    ]);
    for (name, key) in [
        ("fixed horizon", "fixed_horizon"),
        ("always valid", "always_valid"),
    ] {
        let mut want: Vec<u64> = p[key]["per_variant"]
            .as_array()
            .expect("sizes")
            .iter()
            .map(|n| n.as_u64().expect("a count"))
            .collect();
        want.push(p[key]["total"].as_u64().expect("total"));
        // The always-valid row also names N* and the looks.
        let got = row(name);
        assert_eq!(got[got.len() - 3..], want[..], "{name}: {table}");
    }
}

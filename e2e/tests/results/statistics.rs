//! Every statistic of `tools::stats` (what `experiment-results` prints) against an
//! independent implementation: scipy, statsmodels (`e2e/tests/stats/reference.py`), to 1e-9
//! relative or 1e-12 absolute, on edge cases (empty and full arms, 0/10,000 against
//! 100/10,000, 10^5 visitors per arm) and on seeded random counts; and where the reference
//! answers no finite, non-degenerate value, `tools::stats` answers none either.

use crate::stats;

use serde_json::{Value, json};
use stats::{Rng, assert_close, reference};
use tools::stats::{self as s, Arm, Correction, Reason, Sample};

/// The comparisons checked: edge cases, every table with up to 5 visitors per arm, and
/// seeded random ones from small to 10^5 visitors per arm.
fn pairs() -> Vec<(Arm, Arm)> {
    let a = Arm::new;
    let mut pairs = vec![
        (a(1, 0), a(1, 1)),
        (a(1, 1), a(1, 0)),
        (a(100, 0), a(100, 5)),
        (a(100, 5), a(100, 0)),
        (a(10_000, 0), a(10_000, 100)),
        (a(10_000, 100), a(10_000, 0)),
        (a(100, 25), a(100, 15)),
        (a(100, 15), a(100, 25)),
        (a(80, 32), a(120, 30)),
        (a(50, 50), a(40, 40)),
        (a(50, 50), a(40, 30)),
        (a(50, 0), a(40, 0)),
        (a(20, 10), a(20, 10)),
        (a(30, 3), a(30, 9)),
        (a(7, 7), a(1, 0)),
        (a(100_000, 10_000), a(100_000, 10_250)),
        (a(100_000, 50_000), a(100_000, 50_400)),
        (a(100_000, 1), a(100_000, 40)),
        (a(100_000, 99_990), a(100_000, 99_950)),
        (a(2_000_000, 61_000), a(2_000_000, 60_000)),
    ];
    for n1 in 1..=5 {
        for n0 in 1..=5 {
            for x1 in 0..=n1 {
                for x0 in 0..=n0 {
                    pairs.push((a(n1, x1), a(n0, x0)));
                }
            }
        }
    }
    let mut rng = Rng::new(28);
    for i in 0..300 {
        let top = [20, 200, 2_000, 20_000, 100_000][i % 5];
        let (n1, n0) = (rng.range(1, top), rng.range(1, top));
        let rate = [0.001, 0.02, 0.1, 0.5, 0.97][i / 5 % 5];
        let draw = |rng: &mut Rng, n: u64| {
            // Binomial-ish counts around the rate (the exact law does not matter here).
            let mean = n as f64 * rate;
            let sd = (mean * (1.0 - rate)).sqrt();
            let x = mean + sd * (rng.uniform() * 4.0 - 2.0);
            (x.round().max(0.0) as u64).min(n)
        };
        let (x1, x0) = (draw(&mut rng, n1), draw(&mut rng, n0));
        pairs.push((a(n1, x1), a(n0, x0)));
    }
    pairs
}

fn describe(v: Arm, c: Arm) -> String {
    format!(
        "{}/{} against {}/{}",
        v.converted, v.exposed, c.converted, c.exposed
    )
}

#[track_caller]
fn same_interval(what: &str, got: Option<(f64, f64)>, want: &Value) {
    match (got, want.is_null()) {
        (Some((low, high)), false) => {
            assert_close(&format!("{what} low"), low, &want[0]);
            assert_close(&format!("{what} high"), high, &want[1]);
        }
        (None, true) => {}
        (got, _) => panic!("{what}: got {got:?}, reference {want}"),
    }
}

#[test]
fn every_statistic_of_a_comparison_equals_the_reference() {
    let pairs = pairs();
    let request: Vec<Value> = pairs
        .iter()
        .map(|(v, c)| {
            json!({ "variant": [v.exposed, v.converted], "control": [c.exposed, c.converted] })
        })
        .collect();
    let answers = reference(&json!({ "pairs": request }));
    let answers = answers["pairs"].as_array().expect("pairs");
    assert_eq!(answers.len(), pairs.len());
    for ((v, c), want) in pairs.iter().copied().zip(answers) {
        let what = describe(v, c);
        let interval = |i: Result<s::Interval, Reason>| i.ok().map(|i| (i.low, i.high));
        same_interval(
            &format!("{what}: Wilson of the variant"),
            interval(s::wilson(v)),
            &want["wilson_variant"],
        );
        same_interval(
            &format!("{what}: Wilson of the control"),
            interval(s::wilson(c)),
            &want["wilson_control"],
        );

        let diff = s::newcombe_diff(v, c);
        if let Ok(d) = diff {
            assert_close(&format!("{what}: diff"), d.value, &want["diff"]);
        }
        same_interval(
            &format!("{what}: Newcombe"),
            diff.ok().map(|d| (d.low, d.high)),
            &want["newcombe"],
        );

        let fisher = s::fisher_exact(v, c).unwrap_or_else(|r| panic!("{what}: Fisher: {r}"));
        assert_close(&format!("{what}: Fisher p"), fisher, &want["fisher_p"]);

        match (s::lift(v, c), &want["lift"]) {
            (Ok(l), w) if !w.is_null() => {
                assert_close(&format!("{what}: lift"), l.value, &w["value"]);
                assert_close(&format!("{what}: lift low"), l.low, &w["low"]);
                assert_close(&format!("{what}: lift high"), l.high, &w["high"]);
                assert_close(&format!("{what}: lift p"), l.p_value, &w["p_value"]);
            }
            (Err(_), w) if w.is_null() => {}
            (got, w) => panic!("{what}: lift {got:?}, reference {w}"),
        }
    }
}

#[test]
fn the_issues_small_sample_examples_are_fixed() {
    // 0/100 against 5/100: the z-test said 0.022, Fisher's exact test 0.059.
    let p = s::fisher_exact(Arm::new(100, 0), Arm::new(100, 5)).expect("p");
    assert!((p - 0.0594).abs() < 1e-4, "{p}");
    // 0/1 against 1/1: the view's interval was [-1, -1].
    let d = s::newcombe_diff(Arm::new(1, 0), Arm::new(1, 1)).expect("diff");
    assert!(d.high > d.low, "{d:?}");
    // 32/80 against 30/120 (README's example): the lift interval no longer crosses
    // -100% nor contradicts the difference.
    let (v, c) = (Arm::new(80, 32), Arm::new(120, 30));
    let (d, l) = (
        s::newcombe_diff(v, c).expect("diff"),
        s::lift(v, c).expect("lift"),
    );
    assert!(d.low > 0.0 && l.low > 0.0, "{d:?} {l:?}");
    // A variant that converts nobody out of 10,000 is reported, not hidden.
    let m = s::Minimums {
        visitors: 50,
        conversions: 5,
    };
    assert_eq!(
        s::enough_data(Arm::new(10_000, 0), Arm::new(10_000, 100), m),
        Ok(())
    );
    assert_eq!(
        s::lift(Arm::new(10_000, 0), Arm::new(10_000, 100)),
        Err(Reason::NoVariantConversion)
    );
    // No exposure: no statistic, said so.
    for f in [
        |v, c| s::newcombe_diff(v, c).map(|_| ()),
        |v, c| s::fisher_exact(v, c).map(|_| ()),
        |v, c| s::lift(v, c).map(|_| ()),
    ] {
        assert_eq!(f(Arm::new(0, 0), Arm::new(10, 1)), Err(Reason::NoExposure));
        assert_eq!(f(Arm::new(10, 1), Arm::new(0, 0)), Err(Reason::NoExposure));
    }
}

/// Every table up to 40 visitors per arm: whatever is given is finite, of positive width,
/// and a probability; nothing panics.
#[test]
fn no_statistic_is_infinite_nan_or_of_zero_width() {
    for n1 in 1..=40 {
        for n0 in 1..=40 {
            for x1 in 0..=n1 {
                for x0 in 0..=n0 {
                    let (v, c) = (Arm::new(n1, x1), Arm::new(n0, x0));
                    let what = describe(v, c);
                    let d = s::newcombe_diff(v, c).expect("Newcombe is always defined");
                    assert!(
                        d.low.is_finite() && d.high.is_finite() && d.high > d.low,
                        "{what}"
                    );
                    let p = s::fisher_exact(v, c).expect("Fisher is always defined");
                    assert!((0.0..=1.0).contains(&p), "{what}: {p}");
                    if let Ok(l) = s::lift(v, c) {
                        assert!(l.low.is_finite() && l.high.is_finite() && l.high > l.low);
                        assert!(l.low > -1.0 && (0.0..=1.0).contains(&l.p_value), "{what}");
                    }
                }
            }
        }
    }
}

#[test]
fn corrections_equal_statsmodels_for_1_to_9_variants() {
    let mut rng = Rng::new(9);
    let mut families: Vec<Vec<f64>> = Vec::new();
    for m in 1..=9 {
        for shape in 0..6 {
            let family = (0..m)
                .map(|i| match shape {
                    0 => rng.uniform(),
                    1 => rng.uniform() * 0.05,
                    2 => 10f64.powf(-rng.uniform() * 8.0),
                    // Ties.
                    3 => [0.01, 0.02, 0.02, 0.5][i % 4],
                    4 => 1.0 - rng.uniform() * 1e-3,
                    _ => rng.uniform().powi(3),
                })
                .collect();
            families.push(family);
        }
    }
    let answers = reference(&json!({ "families": families }));
    for (family, want) in families
        .iter()
        .zip(answers["families"].as_array().expect("families"))
    {
        for (correction, key) in [(Correction::Holm, "holm"), (Correction::Bh, "bh")] {
            let got = s::adjust(family, correction);
            for (i, g) in got.iter().enumerate() {
                assert_close(&format!("{key} of {family:?} [{i}]"), *g, &want[key][i]);
            }
        }
        assert_eq!(&s::adjust(family, Correction::None), family);
    }
}

#[test]
fn welch_equals_scipy() {
    let mut rng = Rng::new(5);
    let mut cases: Vec<(Sample, Sample)> = vec![
        (
            Sample {
                n: 2,
                mean: 1.0,
                variance: 0.5,
            },
            Sample {
                n: 2,
                mean: 3.0,
                variance: 0.0,
            },
        ),
        (
            Sample {
                n: 80,
                mean: 18.8,
                variance: 20.0,
            },
            Sample {
                n: 120,
                mean: 18.4,
                variance: 25.0,
            },
        ),
    ];
    for _ in 0..60 {
        let sample = |rng: &mut Rng| Sample {
            n: rng.range(2, 50_000),
            mean: rng.uniform() * 100.0,
            variance: rng.uniform() * 400.0 + 1e-3,
        };
        cases.push((sample(&mut rng), sample(&mut rng)));
    }
    let request: Vec<Value> = cases
        .iter()
        .map(|(a, b)| {
            json!({ "variant": [a.n, a.mean, a.variance], "control": [b.n, b.mean, b.variance] })
        })
        .collect();
    let answers = reference(&json!({ "welch": request }));
    for ((a, b), want) in cases
        .iter()
        .zip(answers["welch"].as_array().expect("welch"))
    {
        let got = s::welch(*a, *b).expect("welch");
        assert_close(&format!("welch {a:?} {b:?} diff"), got.diff, &want["diff"]);
        assert_close(
            &format!("welch {a:?} {b:?} p"),
            got.p_value,
            &want["p_value"],
        );
    }
}

//! Edge cases of `experiment_results` (one arm, empty arms, lopsided weights, tiny counts)
//! against the reference, through the view and through `experiment-results`.

use super::*;

/// Counts of one edge case: `(variant, weight, is_control, exposed, converted)`.
type Case = Vec<(&'static str, f64, bool, u64, u64)>;

fn edge_cases() -> Vec<(&'static str, Case)> {
    vec![
        (
            "exp_one_each",
            vec![("a", 50.0, true, 1, 1), ("b", 50.0, false, 1, 0)],
        ),
        (
            "exp_zero_of_100",
            vec![("a", 50.0, true, 100, 5), ("b", 50.0, false, 100, 0)],
        ),
        (
            "exp_broken",
            vec![
                ("a", 50.0, true, 10_000, 100),
                ("b", 50.0, false, 10_000, 0),
            ],
        ),
        (
            "exp_lift",
            vec![("a", 50.0, true, 100, 15), ("b", 50.0, false, 100, 25)],
        ),
        (
            "exp_readme",
            vec![("a", 50.0, true, 120, 30), ("b", 50.0, false, 80, 32)],
        ),
        (
            "exp_all_converted",
            vec![("a", 50.0, true, 40, 40), ("b", 50.0, false, 50, 50)],
        ),
        (
            "exp_none_converted",
            vec![("a", 50.0, true, 40, 0), ("b", 50.0, false, 50, 0)],
        ),
        (
            "exp_control_full",
            vec![("a", 50.0, true, 40, 40), ("b", 50.0, false, 50, 45)],
        ),
        (
            "exp_three",
            vec![
                ("a", 50.0, true, 300, 30),
                ("b", 25.0, false, 140, 21),
                ("c", 25.0, false, 160, 12),
            ],
        ),
        (
            "exp_ten",
            (0..10)
                .map(|i| {
                    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
                    (
                        names[i],
                        10.0,
                        i == 0,
                        90 + 3 * i as u64,
                        9 + (i as u64 % 4),
                    )
                })
                .collect(),
        ),
        // A 10/90 ramp whose small arm converts nobody: no variance there, no statistic
        // (the unpooled test called it worse at p = 0.026; Fisher's p is 0.63).
        (
            "exp_ramp_zero",
            vec![("a", 90.0, true, 972, 13), ("b", 10.0, false, 108, 0)],
        ),
        // Below the minimum-data guard: 40 visitors in an arm.
        (
            "exp_guard",
            vec![("a", 50.0, true, 40, 6), ("b", 50.0, false, 60, 4)],
        ),
        // A ramp with variance in both arms and enough data: tested.
        (
            "exp_ramp",
            vec![("a", 90.0, true, 972, 13), ("b", 10.0, false, 108, 3)],
        ),
        // The smallest false call of the unpooled rule: a 5/95 ramp, one conversion in the
        // small arm.
        // Unpooled, the always-valid p was 1.6e-5 ("worse than the control"); the pooled
        // fixed-horizon p is 0.023, Fisher's 0.015.
        (
            "exp_rare_one",
            vec![("a", 95.0, true, 13_300, 133), ("b", 5.0, false, 700, 1)],
        ),
        (
            "exp_no_control_exposure",
            vec![("a", 50.0, true, 0, 0), ("b", 50.0, false, 30, 3)],
        ),
    ]
}

/// Every column of the view, for edge-case counts, against the reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_case_rows_equal_the_reference() {
    let mut db = Database::new().await;
    let cases = edge_cases();
    let definitions: Vec<_> = cases
        .iter()
        .map(|(id, arms)| Definition {
            experiment: id.to_string(),
            phase: 1,
            variants: arms
                .iter()
                .map(|(v, w, c, _, _)| (v.to_string(), *w, *c))
                .collect(),
        })
        .collect();
    db.define(&definitions).await;
    let mut rng = Rng::new(1);
    let mut events = Vec::new();
    // Each visitor's longest time on page, per experiment and variant.
    let mut times: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
    for (id, arms) in &cases {
        for (variant, _, _, exposed, converted) in arms {
            for v in 0..*exposed {
                let visitor = format!("{id}-{variant}-{v}");
                let sessions = 1 + rng.poisson(1.5);
                let longest = visitor_events(
                    &mut rng,
                    &Visitor {
                        experiment: id,
                        visitor: &visitor,
                        variant,
                        phase: 1,
                        sessions,
                        converts: v < *converted,
                    },
                    &mut events,
                );
                times.entry((id, variant)).or_default().push(longest);
            }
        }
    }
    db.events(&events).await;

    // N* is the default in force when a phase's first exposure arrived (5000 before any
    // is set): a default set now leaves the running experiments as they were, one set
    // before they started is theirs.
    for (setting, tuning) in [
        (None, 5_000.0),
        (Some((1_000.0, "now()")), 5_000.0),
        (Some((2_000.0, "'2025-01-01 00:00:00'")), 2_000.0),
        // A value that is no tuning (0 or less) is passed over.
        (Some((-1.0, "'2025-06-01 00:00:00'")), 2_000.0),
        (Some((0.0, "'2025-07-01 00:00:00'")), 2_000.0),
    ] {
        if let Some((value, set_at)) = setting {
            db.client
                .query(&format!(
                    "INSERT INTO results_settings (name, value, set_at) \
                     SELECT 'sequential_tuning', {value}, {set_at}"
                ))
                .execute()
                .await
                .expect("a setting");
        }
        let rows = db.results("").await;
        check_edge_rows(&cases, &rows, tuning);
    }
    let rows = db.results("").await;
    for (id, _) in &cases {
        check_command(&db.client, id, &rows, &times).await;
    }
    // The rare ramp gets no verdict: its always-valid interval holds 0.
    let rare = rows
        .iter()
        .find(|r| r.experiment_id == "exp_rare_one" && r.is_control == 0)
        .expect("the rare ramp's treatment");
    let p = rare.always_valid_p_value.expect("tested");
    let (low, high) = (
        rare.always_valid_ci_low.expect("low"),
        rare.always_valid_ci_high.expect("high"),
    );
    assert!(p > 0.05 && low < 0.0 && 0.0 < high, "{rare:?}");
}

/// `experiment-results` on the edge cases: per phase, the statistics of `tools::stats` on
/// the view's counts, the corrections across the variants, the view's always-valid
/// columns, each visitor's longest time on page, and a reason wherever a value is missing.
async fn check_command(
    client: &clickhouse::Client,
    id: &str,
    rows: &[ResultsRow],
    times: &BTreeMap<(&str, &str), Vec<f64>>,
) {
    use tools::results::Shown;
    use tools::stats::{self as s, Arm, Correction, Minimums, Sample};
    let settings = tools::results::Settings {
        minimums: Minimums {
            visitors: 50,
            conversions: 5,
        },
        correction: Correction::Holm,
    };
    let reports = tools::results::report(client, id, None, settings)
        .await
        .expect("report");
    assert_eq!(reports.len(), 1, "{id}: one key, one phase");
    let report = &reports[0];
    assert_eq!((report.phase, report.experiment_id.as_str()), (1, id));
    let row = |v: &str| {
        rows.iter()
            .find(|r| r.experiment_id == id && r.variant_id == v)
            .expect("row")
    };
    let control = report.variants.iter().find(|v| v.is_control);
    let sample = |variant: &str| {
        let xs = &times[&(id, variant)];
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let variance = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        Sample {
            n: xs.len() as u64,
            mean,
            variance,
        }
    };
    let mut p_values = Vec::new();
    for v in &report.variants {
        let what = format!("{id} {}", v.variant_id);
        let time = v.time_on_page.as_ref().expect("time on page");
        let want = sample(&v.variant_id);
        assert_eq!(time.visitors, want.n, "{what}");
        assert!(
            stats::close(time.mean, want.mean),
            "{what}: {time:?} {want:?}"
        );
        let Some(c) = &v.comparison else {
            assert!(v.is_control, "{what}");
            continue;
        };
        let Some(control) = control else {
            // The control exposed nobody: no row, no comparison, said so.
            assert_eq!(c.diff.reason(), Some("no control in this phase"), "{what}");
            continue;
        };
        let (arm, control_arm) = (
            Arm::new(v.exposed, v.converted),
            Arm::new(control.exposed, control.converted),
        );
        match s::enough_data(arm, control_arm, settings.minimums) {
            Err(reason) => {
                assert!(!c.enough_data, "{what}");
                assert_eq!(c.diff, Shown::Missing(reason.to_string()), "{what}");
                assert_eq!(c.p_value.value(), None, "{what}");
                assert_eq!(c.always_valid.value(), None, "{what}");
            }
            Ok(()) => {
                assert!(c.enough_data, "{what}");
                assert_eq!(c.diff, s::newcombe_diff(arm, control_arm).into(), "{what}");
                assert_eq!(
                    c.p_value,
                    s::fisher_exact(arm, control_arm).into(),
                    "{what}"
                );
                assert_eq!(c.lift, s::lift(arm, control_arm).into(), "{what}");
                p_values.push((c.p_value.value().copied().expect("p"), c.p_adjusted.clone()));
                let r = row(&v.variant_id);
                let Some(always) = c.always_valid.value() else {
                    // The view refused (an arm without variance): the command says why.
                    assert_eq!(r.always_valid_p_value, None, "{what}");
                    assert_eq!(
                        c.always_valid.reason(),
                        Some(format!("none in the view: {}", r.no_test_reason).as_str()),
                        "{what}"
                    );
                    continue;
                };
                assert_eq!(
                    (Some(always.p_value), Some(always.low), Some(always.high)),
                    (
                        r.always_valid_p_value,
                        r.always_valid_ci_low,
                        r.always_valid_ci_high
                    ),
                    "{what}"
                );
                // The view's variance and this one differ in the last bits.
                let got = time.test.as_ref().and_then(Shown::value).expect("Welch");
                let want = s::welch(want, sample(&control.variant_id)).expect("Welch");
                assert!(
                    stats::close(got.diff, want.diff) && stats::close(got.p_value, want.p_value),
                    "{what}: {got:?} {want:?}"
                );
            }
        }
    }
    let raw: Vec<f64> = p_values.iter().map(|(p, _)| *p).collect();
    for ((_, got), want) in p_values.iter().zip(s::adjust(&raw, Correction::Holm)) {
        assert_eq!(got, &Shown::Value(want), "{id}: Holm across {raw:?}");
    }
    let table = tools::results::render(&reports, settings);
    assert!(
        table.contains(&format!("{id} under {KEY}, phase 1")),
        "{table}"
    );
    // The time on page is in the unit the SDK sends it in.
    assert!(table.contains("time on page: mean ms (Welch p)"), "{table}");
    eprintln!("{table}");
}

fn check_edge_rows(cases: &[(&'static str, Case)], rows: &[ResultsRow], tuning: f64) {
    // Each treatment row against its control, and each experiment's sample ratio.
    let mut pairs = Vec::new();
    let mut srm = Vec::new();
    let mut compared: Vec<&ResultsRow> = Vec::new();
    for (id, arms) in cases {
        let (_, _, _, n0, x0) = arms.iter().find(|a| a.2).expect("a control");
        // The treatments with a weight share the always-valid error rate.
        let family = arms.iter().filter(|a| !a.2 && a.1 > 0.0).count().max(1);
        for (variant, _, control, n, x) in arms {
            let row = rows
                .iter()
                .find(|r| r.experiment_id == *id && r.variant_id == *variant);
            let Some(row) = row else {
                assert_eq!(*n, 0, "{id} {variant}: no row");
                continue;
            };
            assert_eq!((row.exposed, row.converted), (*n, *x), "{id} {variant}");
            assert_eq!(row.is_control == 1, *control, "{id} {variant}");
            if *control {
                assert_eq!((row.ci_low, row.ci_high, row.p_value), (None, None, None));
                assert_eq!(row.always_valid_p_value, None);
            } else if *n0 > 0 {
                let minimums = [schema::MIN_VISITORS, schema::MIN_CONVERSIONS];
                pairs.push(
                    json!({ "variant": [n, x], "control": [n0, x0], "tuning": tuning,
                    "minimums": minimums, "family": family }),
                );
                compared.push(row);
            } else {
                let nulls = (row.diff, row.ci_low, row.p_value, row.always_valid_ci_low);
                assert_eq!(nulls, (None, None, None, None), "{id}: no control exposure");
            }
        }
        srm.push(json!({
            "counts": arms.iter().map(|a| a.3).collect::<Vec<_>>(),
            "weights": arms.iter().map(|a| a.1).collect::<Vec<_>>(),
        }));
    }
    let answers = reference(&json!({ "pairs": pairs, "srm": srm }));
    for (row, want) in compared
        .iter()
        .zip(answers["pairs"].as_array().expect("pairs"))
    {
        let what = format!("{} {} (tuning {tuning})", row.experiment_id, row.variant_id);
        assert_close(
            &format!("{what}: rate"),
            row.conversion_rate,
            &json!(row.converted as f64 / row.exposed as f64),
        );
        assert_close(
            &format!("{what}: diff"),
            row.diff.expect("diff"),
            &want["diff"],
        );
        // A row without statistics says why; one with them says nothing.
        assert_eq!(
            row.no_test_reason.is_empty(),
            want["testable"].as_bool().expect("testable"),
            "{what}: {:?}",
            row.no_test_reason
        );
        let optional = |name: &str, got: Option<f64>, want: &Value| match (got, want.is_null()) {
            (Some(g), false) => assert_close(&format!("{what}: {name}"), g, want),
            (None, true) => {}
            (g, _) => panic!("{what}: {name}: view {g:?}, reference {want}"),
        };
        let z = &want["z_test"];
        optional(
            "ci_low",
            row.ci_low,
            if z.is_null() { z } else { &z["ci"][0] },
        );
        optional(
            "ci_high",
            row.ci_high,
            if z.is_null() { z } else { &z["ci"][1] },
        );
        optional(
            "p_value",
            row.p_value,
            if z.is_null() { z } else { &z["p_value"] },
        );
        let av = &want["always_valid"];
        let field = |f: &dyn Fn(&Value) -> &Value| if av.is_null() { av } else { f(av) };
        optional(
            "always_valid_ci_low",
            row.always_valid_ci_low,
            field(&|a| &a["ci"][0]),
        );
        optional(
            "always_valid_ci_high",
            row.always_valid_ci_high,
            field(&|a| &a["ci"][1]),
        );
        optional(
            "always_valid_p_value",
            row.always_valid_p_value,
            field(&|a| &a["p_value"]),
        );
        // The lift: gbstats' relative difference, its intervals fixed and always-valid.
        let lift = &want["relative"];
        let of_lift = |f: &dyn Fn(&Value) -> &Value| if lift.is_null() { lift } else { f(lift) };
        if !lift.is_null() {
            optional("lift", row.lift, &lift["value"]);
        }
        optional("lift_ci_low", row.lift_ci_low, of_lift(&|l| &l["ci"][0]));
        optional("lift_ci_high", row.lift_ci_high, of_lift(&|l| &l["ci"][1]));
        optional(
            "always_valid_lift_ci_low",
            row.always_valid_lift_ci_low,
            of_lift(&|l| &l["always_valid_ci"][0]),
        );
        optional(
            "always_valid_lift_ci_high",
            row.always_valid_lift_ci_high,
            of_lift(&|l| &l["always_valid_ci"][1]),
        );
        if !av.is_null() {
            // The interval excludes 0 exactly when the p-value is below 0.05.
            let p = row.always_valid_p_value.expect("p");
            let excludes = row.always_valid_ci_low.expect("low") > 0.0
                || row.always_valid_ci_high.expect("high") < 0.0;
            assert_eq!(excludes, p < 0.05, "{what}");
            // gbstats' own p where its unpooled standard error is the larger.
            if !av["p_value_gbstats"].is_null() {
                assert_close(&format!("{what}: gbstats' p"), p, &av["p_value_gbstats"]);
            }
        }
    }
    for ((id, _), want) in cases.iter().zip(answers["srm"].as_array().expect("srm")) {
        for row in rows.iter().filter(|r| r.experiment_id == *id) {
            match row.srm_p_value {
                Some(p) => assert_close(&format!("{id}: srm"), p, want),
                None => panic!("{id}: no SRM p-value, reference {want}"),
            }
        }
    }
}

//! The results views (`experiment_results` and what it reads) against simulated
//! experiments of known truth, with events written straight into a private ClickHouse that
//! has the consumer's migrations:
//!
//! - A/A experiments randomized by visitor with the SDK's hash, several sessions per
//!   visitor, looked at 20 times as the data arrive: the fixed-horizon false-positive rate
//!   at 0.05 and the SRM alarm rate at 0.001 (at the last look) inside their binomial 99.9%
//!   bands, and the always-valid p-value below 0.05 at some look in no more than 5% of
//!   experiments (within the band), where the fixed-horizon p does so far more often;
//! - a weight change between phases (50/50 then 10/90 while the base rate doubles, no true
//!   effect) shows no effect per phase, where pooling the phases shows one;
//! - edge-case counts whose every view column equals the independent reference
//!   (statsmodels, scipy, GrowthBook's gbstats) to 1e-9, for the default and a set tuning.

mod stats;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Instant;

use clickhouse::Row;
use e2e::PrivateClickHouse;
use serde::Deserialize;
use serde_json::{Value, json};
use statrs::distribution::{Binomial, ChiSquared, ContinuousCDF, DiscreteCDF, Normal};
use stats::{Rng, assert_close, bucket, reference};

const KEY: &str = "pk_sim";

/// A database with the consumer's schema in a private ClickHouse, and raw inserts.
struct Database {
    url: String,
    name: String,
    client: clickhouse::Client,
    http: reqwest::Client,
    next_event: u64,
}

impl Database {
    async fn new(server: &PrivateClickHouse) -> Self {
        let name = e2e::unique("sim_");
        let client = e2e::clickhouse_at(&server.url(), &name);
        schema::migrate(&client, &name).await.expect("migrations");
        Self {
            url: server.url(),
            name,
            client,
            http: reqwest::Client::new(),
            next_event: 0,
        }
    }

    /// `INSERT INTO table (columns) FORMAT TabSeparated` with `rows` as the body.
    async fn insert(&self, table: &str, columns: &str, rows: String) {
        let query = format!(
            "INSERT INTO {}.{table} ({columns}) FORMAT TabSeparated",
            self.name
        );
        let response = self
            .http
            .post(&self.url)
            .query(&[("query", query.as_str())])
            .body(rows)
            .send()
            .await
            .expect("ClickHouse answers");
        let status = response.status();
        assert!(
            status.is_success(),
            "insert into {table}: {status} {}",
            response.text().await.unwrap_or_default()
        );
    }

    async fn define(&self, experiments: &[Definition]) {
        self.define_windowed(experiments, 0.0).await;
    }

    /// [`Database::define`], with `conversionWindowHours` (0: none).
    async fn define_windowed(&self, experiments: &[Definition], window_hours: f64) {
        let mut rows = String::new();
        for Definition {
            experiment,
            phase,
            variants,
        } in experiments
        {
            for (variant, weight, control) in variants {
                let _ = writeln!(
                    rows,
                    "{experiment}\t{variant}\tv{phase}\t{weight}\t{}\tlive\t\\N\t\\N\t{{}}\t{}\t{phase}\t{window_hours}",
                    u8::from(*control),
                    // A later phase is loaded ten days after the one before, when the
                    // simulated visitors of the one before (one day of them) are done.
                    1_763_900_000_000_i64 + i64::from(*phase - 1) * 864_000_000,
                );
            }
        }
        self.insert(
            "experiment_variants",
            "experiment_id, variant_id, version, weight, is_control, status, start_at, \
             end_at, parts, loaded_at, phase, conversion_window_hours",
            rows,
        )
        .await;
    }

    /// The events as rows of `events`.
    async fn events(&mut self, events: &[Event]) {
        let mut rows = String::with_capacity(events.len() * 160);
        for e in events {
            self.next_event += 1;
            let _ = writeln!(
                rows,
                "00000000-0000-4000-8000-{:012x}\t2026-11-23 12:00:00\t{KEY}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t0\t0",
                self.next_event,
                e.name,
                e.experiment,
                e.variant,
                e.session,
                e.visitor,
                e.phase,
                e.time_ms,
                e.time_on_page.map_or("\\N".to_owned(), |t| t.to_string()),
            );
        }
        self.insert(
            "events",
            "event_id, received_at, public_key, event_name, experiment_id, variant_id, \
             session_id, visitor_id, phase, event_time, time_on_page, test, is_bot",
            rows,
        )
        .await;
    }

    async fn results(&self, filter: &str) -> Vec<ResultRow> {
        self.client
            .query(&format!(
                "SELECT experiment_id, phase, variant_id, is_control, exposed, converted, \
                 conversion_rate, diff, ci_low, ci_high, p_value, srm_p_value, \
                 always_valid_p_value, always_valid_ci_low, always_valid_ci_high, \
                 no_test_reason FROM experiment_results WHERE public_key = '{KEY}' {filter} \
                 ORDER BY experiment_id, phase, variant_id"
            ))
            .fetch_all()
            .await
            .expect("experiment_results")
    }
}

/// An experiment's phase: its variants as `(variant, weight, is_control)`.
struct Definition {
    experiment: String,
    phase: u32,
    variants: Vec<(String, f64, bool)>,
}

/// One simulated visitor of an experiment.
struct Visitor<'a> {
    experiment: &'a str,
    visitor: &'a str,
    variant: &'a str,
    phase: u32,
    sessions: u64,
    converts: bool,
}

#[derive(Clone, Debug, Deserialize, Row)]
struct ResultRow {
    experiment_id: String,
    phase: u32,
    variant_id: String,
    is_control: u8,
    exposed: u64,
    converted: u64,
    conversion_rate: f64,
    diff: Option<f64>,
    ci_low: Option<f64>,
    ci_high: Option<f64>,
    p_value: Option<f64>,
    srm_p_value: Option<f64>,
    always_valid_p_value: Option<f64>,
    always_valid_ci_low: Option<f64>,
    always_valid_ci_high: Option<f64>,
    no_test_reason: String,
}

struct Event {
    name: &'static str,
    experiment: String,
    variant: String,
    session: String,
    visitor: String,
    phase: u32,
    time_ms: i64,
    time_on_page: Option<f64>,
}

/// One visitor's events: an impression of their variant in each of their sessions (each
/// with a time on page), and if they convert, a conversion in one of those sessions after
/// its impression. Answers the visitor's longest time on page.
fn visitor_events(rng: &mut Rng, v: &Visitor, events: &mut Vec<Event>) -> f64 {
    let start = 1_763_900_000_000_i64 + rng.range(0, 86_400_000) as i64;
    let session_start = |s: u64| start + s as i64 * 3_600_000;
    let event = |name, s: u64, time_ms, time_on_page| Event {
        name,
        experiment: v.experiment.to_owned(),
        variant: v.variant.to_owned(),
        session: format!("{}-s{s}", v.visitor),
        visitor: v.visitor.to_owned(),
        phase: v.phase,
        time_ms,
        time_on_page,
    };
    let mut longest = 0.0_f64;
    for s in 0..v.sessions {
        let seconds = (rng.uniform() * 1_200.0).round() / 10.0;
        longest = longest.max(seconds);
        events.push(event("impression", s, session_start(s), Some(seconds)));
    }
    if v.converts {
        let s = rng.range(0, v.sessions - 1);
        events.push(event("conversion", s, session_start(s) + 60_000, None));
    }
    longest
}

/// The 99.9% band of Binomial(n, p): `[lo, hi]` with P(X < lo) and P(X > hi) each at most
/// 0.0005.
fn band(n: u64, p: f64) -> (u64, u64) {
    let b = Binomial::new(p, n).expect("binomial");
    let lo = (0..=n).find(|k| b.cdf(*k) >= 0.0005).expect("lo");
    let hi = (0..=n).find(|k| b.cdf(*k) >= 0.9995).expect("hi");
    (lo, hi)
}

/// What A/A experiments showed over their looks.
struct Looked {
    /// Per experiment, the smallest fixed-horizon and always-valid p-values seen.
    min_fixed: Vec<f64>,
    min_always: Vec<f64>,
    /// The treatment rows at the last look.
    last: Vec<ResultRow>,
    sessions_total: u64,
}

/// `ids.len()` A/A experiments of `visitors` visitors (1 + Poisson(1.5) sessions each, each
/// experiment's base rate drawn from `rates`), split by the SDK's hash of the visitor with
/// `control_share` to the control, arriving in `looks` chunks with a look at the view after
/// each.
async fn a_a_looks(
    db: &mut Database,
    ids: &[String],
    visitors: usize,
    looks: usize,
    control_share: f64,
    rates: std::ops::Range<f64>,
    seed: u64,
) -> Looked {
    let definitions: Vec<_> = ids
        .iter()
        .map(|id| Definition {
            experiment: id.clone(),
            phase: 1,
            variants: vec![
                ("var_a".to_owned(), 100.0 * control_share, true),
                ("var_b".to_owned(), 100.0 * (1.0 - control_share), false),
            ],
        })
        .collect();
    db.define(&definitions).await;
    let mut rng = Rng::new(seed);
    let rates: Vec<f64> = ids
        .iter()
        .map(|_| rates.start + (rates.end - rates.start) * rng.uniform())
        .collect();
    let mut looked = Looked {
        min_fixed: vec![1.0; ids.len()],
        min_always: vec![1.0; ids.len()],
        last: Vec::new(),
        sessions_total: 0,
    };
    for look in 0..looks {
        let mut events = Vec::new();
        for (e, id) in ids.iter().enumerate() {
            for v in (look * visitors / looks)..((look + 1) * visitors / looks) {
                let visitor = format!("{id}-v{v}");
                let variant = if bucket(id, &visitor) < control_share {
                    "var_a"
                } else {
                    "var_b"
                };
                let sessions = 1 + rng.poisson(1.5);
                looked.sessions_total += sessions;
                let converts = rng.bernoulli(rates[e]);
                visitor_events(
                    &mut rng,
                    &Visitor {
                        experiment: id,
                        visitor: &visitor,
                        variant,
                        phase: 1,
                        sessions,
                        converts,
                    },
                    &mut events,
                );
            }
        }
        db.events(&events).await;
        let filter = format!(
            "AND is_control = 0 AND startsWith(experiment_id, '{}')",
            ids[0].trim_end_matches(char::is_numeric)
        );
        let rows = db.results(&filter).await;
        assert_eq!(rows.len(), ids.len(), "one treatment row per experiment");
        for (e, row) in rows.iter().enumerate() {
            assert_eq!(row.experiment_id, ids[e]);
            if let Some(p) = row.p_value {
                looked.min_fixed[e] = looked.min_fixed[e].min(p);
            }
            if let Some(p) = row.always_valid_p_value {
                looked.min_always[e] = looked.min_always[e].min(p);
            }
        }
        looked.last = rows;
    }
    looked
}

/// 500 A/A experiments of 1,000 visitors (1 + Poisson(1.5) sessions each, base rates 5%
/// to 20%), 50/50 by the SDK's hash of the visitor, arriving in 20 chunks with a look at
/// the view after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_a_experiments_keep_their_error_rates_under_20_looks() {
    const EXPERIMENTS: usize = 500;
    const VISITORS: usize = 1_000;
    const LOOKS: usize = 20;
    let started = Instant::now();
    let server = PrivateClickHouse::start().await;
    let mut db = Database::new(&server).await;
    let ids: Vec<String> = (0..EXPERIMENTS).map(|i| format!("exp_aa_{i:04}")).collect();
    let Looked {
        min_fixed,
        min_always,
        last,
        sessions_total,
    } = a_a_looks(&mut db, &ids, VISITORS, LOOKS, 0.5, 0.05..0.20, 20_261_123).await;

    // Every visitor counted once, however many sessions.
    let all = db.results("").await;
    let exposed: u64 = all.iter().map(|r| r.exposed).sum();
    assert_eq!(exposed, (EXPERIMENTS * VISITORS) as u64);
    assert!(sessions_total > 2 * exposed, "several sessions per visitor");

    let n = EXPERIMENTS as u64;
    let count = |f: &dyn Fn(usize) -> bool| (0..EXPERIMENTS).filter(|e| f(*e)).count() as u64;
    let false_positives = count(&|e| last[e].p_value.is_some_and(|p| p < 0.05));
    let srm_alarms = count(&|e| last[e].srm_p_value.is_some_and(|p| p < 0.001));
    let always_valid_ever = count(&|e| min_always[e] < 0.05);
    let fixed_ever = count(&|e| min_fixed[e] < 0.05);
    let (fp_lo, fp_hi) = band(n, 0.05);
    let (srm_lo, srm_hi) = band(n, 0.001);
    eprintln!(
        "A/A, {EXPERIMENTS} experiments of {VISITORS} visitors, {LOOKS} looks: \
         fixed-horizon p < 0.05 at the end {false_positives} (band {fp_lo}..={fp_hi}); \
         SRM p < 0.001 {srm_alarms} (band {srm_lo}..={srm_hi}); always-valid p < 0.05 at \
         some look {always_valid_ever} (at most {fp_hi}); fixed-horizon p < 0.05 at some \
         look {fixed_ever}; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        (fp_lo..=fp_hi).contains(&false_positives),
        "false positives {false_positives} outside {fp_lo}..={fp_hi}"
    );
    assert!(
        (srm_lo..=srm_hi).contains(&srm_alarms),
        "SRM alarms {srm_alarms} outside {srm_lo}..={srm_hi}"
    );
    assert!(
        always_valid_ever <= fp_hi,
        "the always-valid p went below 0.05 in {always_valid_ever} of {n} A/A experiments"
    );
    // The peeking this guards against is real in these data: the fixed-horizon p, looked
    // at 20 times, goes below 0.05 far more often than 5%.
    assert!(
        fixed_ever > fp_hi,
        "fixed-horizon p < 0.05 at some look in only {fixed_ever} of {n}"
    );

    // The same events counted by session, as the views once did: the sessions
    // of a visitor share their variant, so the SRM test alarms far more often than 0.1%.
    // (This is what the bands above would catch if the views counted sessions again.)
    let sessions: Vec<(String, String, u64, u64)> = db
        .client
        .query(&format!(
            "SELECT toString(experiment_id), toString(variant_id), uniqExact(session_id), \
             uniqExactIf(session_id, event_name = 'conversion') FROM events \
             WHERE public_key = '{KEY}' GROUP BY experiment_id, variant_id \
             ORDER BY experiment_id, variant_id"
        ))
        .fetch_all()
        .await
        .expect("sessions");
    assert_eq!(sessions.len(), 2 * EXPERIMENTS);
    let by_session: Vec<(f64, f64)> = sessions
        .chunks(2)
        .map(|arms| {
            let ((na, xa), (nb, xb)) = ((arms[0].2, arms[0].3), (arms[1].2, arms[1].3));
            let (na, nb) = (na as f64, nb as f64);
            let half = (na + nb) / 2.0;
            let chi2 = ((na - half).powi(2) + (nb - half).powi(2)) / half;
            let srm = ChiSquared::new(1.0).expect("df").sf(chi2);
            let (pa, pb) = (xa as f64 / na, xb as f64 / nb);
            let se = (pa * (1.0 - pa) / na + pb * (1.0 - pb) / nb).sqrt();
            let z = Normal::standard().sf(((pb - pa) / se).abs()) * 2.0;
            (z, srm)
        })
        .collect();
    let session_fp = by_session.iter().filter(|(p, _)| *p < 0.05).count();
    let session_srm = by_session.iter().filter(|(_, p)| *p < 0.001).count() as u64;
    eprintln!(
        "the same events by session: z-test p < 0.05 {session_fp}, SRM p < 0.001 {session_srm}"
    );
    assert!(session_srm > srm_hi, "by session: {session_srm} SRM alarms");
}

/// A/A on a 10/90 ramp with rare conversions (1% to 2%): 300 experiments of 3,000 visitors,
/// 20 looks. The small arm often converts nobody or a handful; without the refusal of
/// zero-variance arms and the minimum-data guard the always-valid p went below 0.05 at
/// some look in 61 of 200 such experiments. Neither p may go beyond its error rate: the
/// fixed-horizon one at the last look, the always-valid one at any look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_a_on_a_ramped_split_with_rare_conversions_keeps_its_error_rates() {
    const EXPERIMENTS: usize = 300;
    let started = Instant::now();
    let server = PrivateClickHouse::start().await;
    let mut db = Database::new(&server).await;
    let ids: Vec<String> = (0..EXPERIMENTS)
        .map(|i| format!("exp_ramp_{i:04}"))
        .collect();
    let looked = a_a_looks(&mut db, &ids, 3_000, 20, 0.9, 0.01..0.02, 20_261_126).await;
    let n = EXPERIMENTS as u64;
    let (fp_lo, fp_hi) = band(n, 0.05);
    let false_positives = looked
        .last
        .iter()
        .filter(|r| r.p_value.is_some_and(|p| p < 0.05))
        .count() as u64;
    let tested = looked.last.iter().filter(|r| r.p_value.is_some()).count();
    let always_valid_ever = looked.min_always.iter().filter(|p| **p < 0.05).count() as u64;
    let fixed_ever = looked.min_fixed.iter().filter(|p| **p < 0.05).count() as u64;
    eprintln!(
        "A/A at 10/90, base rate 1-2%, {EXPERIMENTS} experiments of 3,000 visitors, 20 looks: \
         tested at the end {tested}; fixed-horizon p < 0.05 at the end {false_positives} \
         (at most {fp_hi}); always-valid p < 0.05 at some look {always_valid_ever} (at most \
         {fp_hi}); fixed-horizon p < 0.05 at some look {fixed_ever}; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        tested * 10 > EXPERIMENTS * 9,
        "most are tested at the end: {tested}"
    );
    assert!(
        false_positives <= fp_hi,
        "false positives {false_positives} above {fp_hi} (band from {fp_lo})"
    );
    assert!(
        always_valid_ever <= fp_hi,
        "the always-valid p went below 0.05 in {always_valid_ever} of {n} ramped A/A experiments"
    );
}

/// A weight change between phases: 50/50 in phase 1 at a 10% base rate, 10/90 in phase 2 at 20%,
/// no true effect. Pooled, var_b looks 4.8 points better; per phase, nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_change_shows_no_effect_per_phase() {
    const VISITORS: usize = 20_000;
    let server = PrivateClickHouse::start().await;
    let mut db = Database::new(&server).await;
    let id = "exp_weights".to_owned();
    let phase = |phase: u32, a: f64, b: f64| Definition {
        experiment: id.clone(),
        phase,
        variants: vec![
            ("var_a".to_owned(), a, true),
            ("var_b".to_owned(), b, false),
        ],
    };
    db.define(&[phase(1, 50.0, 50.0), phase(2, 10.0, 90.0)])
        .await;
    let mut rng = Rng::new(4_760);
    let mut events = Vec::new();
    let mut truth: BTreeMap<(u32, &str), (u64, u64)> = BTreeMap::new();
    for (phase, share_a, rate) in [(1, 0.5, 0.10), (2, 0.1, 0.20)] {
        for v in 0..VISITORS {
            let visitor = format!("p{phase}-v{v}");
            let variant = if bucket(&format!("{id}:{phase}"), &visitor) < share_a {
                "var_a"
            } else {
                "var_b"
            };
            let sessions = 1 + rng.poisson(1.5);
            let converts = rng.bernoulli(rate);
            let entry = truth.entry((phase, variant)).or_default();
            entry.0 += 1;
            entry.1 += u64::from(converts);
            visitor_events(
                &mut rng,
                &Visitor {
                    experiment: &id,
                    visitor: &visitor,
                    variant,
                    phase,
                    sessions,
                    converts,
                },
                &mut events,
            );
        }
    }
    db.events(&events).await;

    let rows = db.results("").await;
    let got: BTreeMap<(u32, &str), (u64, u64)> = rows
        .iter()
        .map(|r| ((r.phase, r.variant_id.as_str()), (r.exposed, r.converted)))
        .collect();
    assert_eq!(got, truth, "visitors and conversions per phase and variant");
    for row in rows.iter().filter(|r| r.is_control == 0) {
        let (low, high) = (row.ci_low.expect("ci"), row.ci_high.expect("ci"));
        let (av_low, av_high) = (
            row.always_valid_ci_low.expect("always-valid"),
            row.always_valid_ci_high.expect("always-valid"),
        );
        eprintln!(
            "phase {}: diff {:+.4} [{low:+.4}, {high:+.4}], p {:.3}, always-valid p {:.3}, \
             SRM p {:.3}",
            row.phase,
            row.diff.expect("diff"),
            row.p_value.expect("p"),
            row.always_valid_p_value.expect("p"),
            row.srm_p_value.expect("srm")
        );
        assert!(low < 0.0 && 0.0 < high, "phase {}: {row:?}", row.phase);
        assert!(
            av_low < 0.0 && 0.0 < av_high,
            "phase {}: {row:?}",
            row.phase
        );
        assert!(row.p_value.expect("p") > 0.05, "{row:?}");
        // Against the phase's own weights: 10/90 is no mismatch in phase 2.
        assert!(row.srm_p_value.expect("srm") > 0.001, "{row:?}");
    }
    // What pooling the phases would have said, from the same counts.
    let pooled = |variant: &str| {
        let (n, x) = truth
            .iter()
            .filter(|((_, v), _)| *v == variant)
            .fold((0, 0), |(n, x), (_, (a, b))| (n + a, x + b));
        tools::stats::Arm::new(n, x)
    };
    let (a, b) = (pooled("var_a"), pooled("var_b"));
    let p = tools::stats::fisher_exact(b, a).expect("p");
    let diff = tools::stats::newcombe_diff(b, a).expect("diff");
    eprintln!("pooled: diff {:+.4}, p {p:.1e}", diff.value);
    assert!(
        diff.low > 0.03 && p < 1e-10,
        "pooling shows a false effect: {diff:?} {p}"
    );
}

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
        (
            "exp_no_control_exposure",
            vec![("a", 50.0, true, 0, 0), ("b", 50.0, false, 30, 3)],
        ),
    ]
}

/// Every column of the view, for edge-case counts, against the reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_case_rows_equal_the_reference() {
    let server = PrivateClickHouse::start().await;
    let mut db = Database::new(&server).await;
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
}

/// `experiment-results` on the edge cases: per phase, the statistics of `tools::stats` on
/// the view's counts, the corrections across the variants, the view's always-valid
/// columns, each visitor's longest time on page, and a reason wherever a value is missing.
async fn check_command(
    client: &clickhouse::Client,
    id: &str,
    rows: &[ResultRow],
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

fn check_edge_rows(cases: &[(&'static str, Case)], rows: &[ResultRow], tuning: f64) {
    // Each treatment row against its control, and each experiment's sample ratio.
    let mut pairs = Vec::new();
    let mut srm = Vec::new();
    let mut compared: Vec<&ResultRow> = Vec::new();
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
        if !av.is_null() {
            // The interval excludes 0 exactly when the p-value is below 0.05.
            let p = row.always_valid_p_value.expect("p");
            let excludes = row.always_valid_ci_low.expect("low") > 0.0
                || row.always_valid_ci_high.expect("high") < 0.0;
            assert_eq!(excludes, p < 0.05, "{what}");
            assert_close(&format!("{what}: gbstats' p"), p, &av["p_value_gbstats"]);
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

#[test]
fn murmur3_is_the_sdks() {
    // The vectors of sdk/test/assign.test.ts.
    assert_eq!(stats::murmur3("", 0), 0);
    assert_eq!(stats::murmur3("", 1), 0x514e_28b7);
    assert_eq!(stats::murmur3("hello", 0), 0x248b_fa47);
    assert_eq!(
        stats::murmur3("The quick brown fox jumps over the lazy dog", 0),
        0x2e4f_f723
    );
}

/// An arm of an hourly simulation: its weight, its conversion rate, and the longest delay
/// of its conversions after exposure (uniform up to it), in hours.
#[derive(Clone, Copy)]
struct Arm {
    weight: f64,
    rate: f64,
    delay_hours: f64,
}

/// Experiments whose visitors arrive uniformly over `hours` from `start_ms`, looked at every
/// hour through `experiment_results_over_time`.
struct Hourly {
    name: String,
    experiments: usize,
    visitors: usize,
    hours: i64,
    /// The control first.
    arms: Vec<Arm>,
    window_hours: f64,
    start_ms: i64,
}

#[derive(Debug, Deserialize, Row)]
struct HourRow {
    experiment_id: String,
    hour: u32,
    is_control: u8,
    p_value: Option<f64>,
    always_valid_p_value: Option<f64>,
    srm_p_value: Option<f64>,
}

/// What each experiment of an hourly simulation showed: the smallest always-valid p of any
/// treatment at any hour, the smallest sample-ratio p at any hour, and the smallest
/// fixed-horizon p of its treatments at its last hour.
#[derive(Default)]
struct Seen {
    always: Vec<f64>,
    srm: Vec<f64>,
    fixed_last: Vec<f64>,
}

impl Seen {
    fn below(values: &[f64], alpha: f64) -> u64 {
        values.iter().filter(|p| **p < alpha).count() as u64
    }
}

/// Runs `sim`: defines it, writes its events at once, reads every hour.
async fn hourly(db: &mut Database, sim: &Hourly, rng: &mut Rng) -> Seen {
    let ids: Vec<String> = (0..sim.experiments)
        .map(|e| format!("exp_{}_{e:04}", sim.name))
        .collect();
    let variants: Vec<String> = (0..sim.arms.len()).map(|a| format!("var_{a}")).collect();
    let definitions: Vec<Definition> = ids
        .iter()
        .map(|id| Definition {
            experiment: id.clone(),
            phase: 1,
            variants: sim
                .arms
                .iter()
                .zip(&variants)
                .enumerate()
                .map(|(a, (arm, v))| (v.clone(), arm.weight, a == 0))
                .collect(),
        })
        .collect();
    db.define_windowed(&definitions, sim.window_hours).await;
    let total: f64 = sim.arms.iter().map(|a| a.weight).sum();
    let mut events = Vec::new();
    for id in &ids {
        for v in 0..sim.visitors {
            let mut draw = rng.uniform() * total;
            let a = sim
                .arms
                .iter()
                .position(|arm| {
                    draw -= arm.weight;
                    draw < 0.0
                })
                .unwrap_or(sim.arms.len() - 1);
            let arm = sim.arms[a];
            let visitor = format!("{id}-v{v}");
            let at = sim.start_ms + (rng.uniform() * (sim.hours * 3_600_000) as f64) as i64;
            let event = |name, time_ms| Event {
                name,
                experiment: id.clone(),
                variant: variants[a].clone(),
                session: visitor.clone(),
                visitor: visitor.clone(),
                phase: 1,
                time_ms,
                time_on_page: None,
            };
            events.push(event("impression", at));
            if rng.bernoulli(arm.rate) {
                let delay = 1_000 + (rng.uniform() * arm.delay_hours * 3_600_000.0) as i64;
                events.push(event("conversion", at + delay));
            }
        }
    }
    db.events(&events).await;
    let rows: Vec<HourRow> = db
        .client
        .query(&format!(
            "SELECT experiment_id, toUInt32(hour) AS hour, is_control, p_value, \
             always_valid_p_value, srm_p_value FROM experiment_results_over_time \
             WHERE public_key = '{KEY}' AND startsWith(experiment_id, 'exp_{}_') \
             ORDER BY experiment_id, hour",
            sim.name
        ))
        .fetch_all()
        .await
        .expect("experiment_results_over_time");
    let mut seen = Seen::default();
    for id in &ids {
        let of: Vec<&HourRow> = rows.iter().filter(|r| &r.experiment_id == id).collect();
        let last = of.iter().map(|r| r.hour).max().expect("rows");
        let smallest = |values: &mut dyn Iterator<Item = Option<f64>>| {
            values.flatten().fold(1.0_f64, f64::min)
        };
        let treatments = || of.iter().filter(|r| r.is_control == 0);
        seen.always
            .push(smallest(&mut treatments().map(|r| r.always_valid_p_value)));
        seen.srm
            .push(smallest(&mut of.iter().map(|r| r.srm_p_value)));
        seen.fixed_last.push(smallest(
            &mut treatments().filter(|r| r.hour == last).map(|r| r.p_value),
        ));
    }
    seen
}

/// A/A experiments at 50/50, 10/90 and 2/98 with base rates of 1% and 10%, looked at every
/// hour for a day: the always-valid p below 0.05 at any hour, the sequential sample-ratio
/// p below 0.05 at any hour, and the fixed-horizon p below 0.05 at the last hour, each in
/// no more experiments than the 99.9% band of 5% allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hourly_looks_at_a_a_experiments_keep_their_error_rates_on_every_split() {
    const EXPERIMENTS: usize = 100;
    let server = PrivateClickHouse::start().await;
    let mut db = Database::new(&server).await;
    let mut rng = Rng::new(41);
    let (_, hi) = band(EXPERIMENTS as u64, 0.05);
    let mut failures = Vec::new();
    for (control, visitors) in [(50.0, 2_000), (10.0, 5_000), (2.0, 10_000)] {
        for rate in [0.01, 0.10] {
            let started = Instant::now();
            let arm = |weight| Arm {
                weight,
                rate,
                delay_hours: 2.0,
            };
            let sim = Hourly {
                name: format!("aa{control}r{}", rate * 100.0),
                experiments: EXPERIMENTS,
                visitors,
                hours: 24,
                arms: vec![arm(control), arm(100.0 - control)],
                window_hours: 0.0,
                start_ms: contract::event::now_millis() - 3 * 86_400_000,
            };
            let seen = hourly(&mut db, &sim, &mut rng).await;
            let counts = [
                Seen::below(&seen.always, 0.05),
                Seen::below(&seen.srm, 0.05),
                Seen::below(&seen.fixed_last, 0.05),
            ];
            eprintln!(
                "A/A {control}/{} at {}%, {EXPERIMENTS} x {visitors} visitors, hourly looks \
                 over a day: always-valid p < 0.05 at some hour {}, sequential SRM p < 0.05 \
                 at some hour {}, fixed-horizon p < 0.05 at the end {} (at most {hi}); {:.1} s",
                100.0 - control,
                rate * 100.0,
                counts[0],
                counts[1],
                counts[2],
                started.elapsed().as_secs_f64()
            );
            if counts.iter().any(|c| *c > hi) {
                failures.push((control, rate, counts));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "above {hi} of {EXPERIMENTS}: {failures:?}"
    );
}

/// A/A experiments with four treatments beside the control (20% each): the always-valid
/// verdicts share 5% across the family, so some treatment goes below 0.05 at some hour in
/// no more experiments than the band of 5% allows. (The test is conservative enough that
/// without the sharing it stayed in the band too, 7 of 150 at 12,000 visitors over 48
/// hours: the sharing itself is checked exactly, against gbstats at 5% / family, by
/// `edge_case_rows_equal_the_reference`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_treatments_keep_the_family_wise_error_rate_under_hourly_looks() {
    const EXPERIMENTS: usize = 150;
    let server = PrivateClickHouse::start().await;
    let mut db = Database::new(&server).await;
    let mut rng = Rng::new(4_444);
    let arm = Arm {
        weight: 20.0,
        rate: 0.10,
        delay_hours: 2.0,
    };
    let sim = Hourly {
        name: "four".into(),
        experiments: EXPERIMENTS,
        visitors: 2_500,
        hours: 24,
        arms: vec![arm; 5],
        window_hours: 0.0,
        start_ms: contract::event::now_millis() - 3 * 86_400_000,
    };
    let seen = hourly(&mut db, &sim, &mut rng).await;
    let (_, hi) = band(EXPERIMENTS as u64, 0.05);
    let any = Seen::below(&seen.always, 0.05);
    eprintln!(
        "A/A with 4 treatments, {EXPERIMENTS} experiments, hourly looks: some treatment's \
         always-valid p < 0.05 at some hour in {any} (at most {hi})"
    );
    assert!(any <= hi, "{any} of {EXPERIMENTS} above {hi}");
}

/// A treatment that only makes visitors convert sooner (within 12 hours, the control within
/// 96), at the same eventual rate, with a 120-hour window, its windows long past: hour by
/// hour it looks better, but the mature, windowed result shows no effect beyond the band.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converting_sooner_is_no_effect_on_the_mature_windowed_result() {
    const EXPERIMENTS: usize = 100;
    let server = PrivateClickHouse::start().await;
    let mut db = Database::new(&server).await;
    let mut rng = Rng::new(96);
    let arm = |delay_hours| Arm {
        weight: 50.0,
        rate: 0.10,
        delay_hours,
    };
    let sim = Hourly {
        name: "sooner".into(),
        experiments: EXPERIMENTS,
        visitors: 3_000,
        hours: 24,
        arms: vec![arm(96.0), arm(12.0)],
        window_hours: 120.0,
        start_ms: contract::event::now_millis() - 30 * 86_400_000,
    };
    let seen = hourly(&mut db, &sim, &mut rng).await;
    let live = Seen::below(&seen.always, 0.05);
    #[derive(Debug, Deserialize, Row)]
    struct Mature {
        exposed: u64,
        converted: u64,
        p_value: Option<f64>,
        always_valid_p_value: Option<f64>,
        mature_visitors: u64,
        mature_converted: u64,
        mature_p_value: Option<f64>,
        mature_always_valid_p_value: Option<f64>,
    }
    let rows: Vec<Mature> = db
        .client
        .query(&format!(
            "SELECT exposed, converted, p_value, always_valid_p_value, mature_visitors, \
             mature_converted, mature_p_value, mature_always_valid_p_value FROM experiment_results \
             WHERE public_key = '{KEY}' AND startsWith(experiment_id, 'exp_sooner_') \
             AND is_control = 0"
        ))
        .fetch_all()
        .await
        .expect("experiment_results");
    assert_eq!(rows.len(), EXPERIMENTS);
    // Every window is past: the mature statistics are those of all visitors.
    for r in &rows {
        assert_eq!(
            (r.mature_visitors, r.mature_converted, r.mature_p_value),
            (r.exposed, r.converted, r.p_value)
        );
        assert_eq!(r.mature_always_valid_p_value, r.always_valid_p_value);
    }
    let mature = rows
        .iter()
        .filter(|r| r.mature_p_value.expect("tested") < 0.05)
        .count() as u64;
    let (_, hi) = band(EXPERIMENTS as u64, 0.05);
    eprintln!(
        "converting sooner, {EXPERIMENTS} experiments: always-valid p < 0.05 at some hour in \
         {live}; mature windowed p < 0.05 in {mature} (at most {hi})"
    );
    assert!(mature <= hi, "{mature} of {EXPERIMENTS} above {hi}");
    assert!(
        live > EXPERIMENTS as u64 / 2,
        "hour by hour the sooner conversions show as an effect: {live}"
    );
}

/// A realistic effect, 10% against 12% at 50/50 with the visitors the fixed-horizon design
/// needs for 80% power: the fixed-horizon test at the end finds it in the band of 80%, and
/// the always-valid test at the end as often as the normal approximation of its boundary
/// predicts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_realistic_effect_is_found_with_the_power_planned() {
    const EXPERIMENTS: usize = 100;
    let normal = Normal::new(0.0, 1.0).expect("normal");
    let (p0, p1) = (0.10, 0.12);
    let pooled = f64::midpoint(p0, p1);
    let (za, zb) = (normal.inverse_cdf(0.975), normal.inverse_cdf(0.8));
    let per_arm = ((za * (2.0 * pooled * (1.0 - pooled)).sqrt()
        + zb * (p0 * (1.0 - p0) + p1 * (1.0 - p1)).sqrt())
        / (p1 - p0))
        .powi(2)
        .ceil();
    let server = PrivateClickHouse::start().await;
    let mut db = Database::new(&server).await;
    let mut rng = Rng::new(8_080);
    let arm = |rate| Arm {
        weight: 50.0,
        rate,
        delay_hours: 1.0,
    };
    let sim = Hourly {
        name: "power".into(),
        experiments: EXPERIMENTS,
        visitors: 2 * per_arm as usize,
        hours: 24,
        arms: vec![arm(p0), arm(p1)],
        window_hours: 0.0,
        start_ms: contract::event::now_millis() - 3 * 86_400_000,
    };
    let seen = hourly(&mut db, &sim, &mut rng).await;
    let fixed = Seen::below(&seen.fixed_last, 0.05);
    let (fixed_lo, fixed_hi) = band(EXPERIMENTS as u64, 0.8);
    // The always-valid test rejects at the end where |z| passes its boundary at n visitors.
    let n = 2.0 * per_arm;
    let alpha: f64 = 0.05;
    let bound = -2.0 * alpha.ln();
    let n_rho2 = n * (bound + (bound + 1.0).ln()) / 5_000.0;
    let z_star = ((1.0 + n_rho2) / n_rho2 * ((1.0 + n_rho2).ln() + bound)).sqrt();
    let shift = (p1 - p0) / (p0 * (1.0 - p0) / per_arm + p1 * (1.0 - p1) / per_arm).sqrt();
    let predicted = normal.cdf(shift - z_star) + normal.cdf(-shift - z_star);
    let (av_lo, av_hi) = band(EXPERIMENTS as u64, predicted);
    let rows: Vec<Option<f64>> = db
        .client
        .query(&format!(
            "SELECT always_valid_p_value FROM experiment_results WHERE public_key = '{KEY}' \
             AND startsWith(experiment_id, 'exp_power_') AND is_control = 0"
        ))
        .fetch_all()
        .await
        .expect("experiment_results");
    let always_at_end = rows.iter().filter(|p| p.is_some_and(|p| p < 0.05)).count() as u64;
    let always_ever = Seen::below(&seen.always, 0.05);
    eprintln!(
        "10% against 12%, {per_arm} visitors per arm, {EXPERIMENTS} experiments: fixed-horizon \
         found it in {fixed} (band {fixed_lo}-{fixed_hi}); always-valid at the end in \
         {always_at_end} (predicted {:.1}%, band {av_lo}-{av_hi}), at some hour in {always_ever}",
        predicted * 100.0
    );
    assert!(
        (fixed_lo..=fixed_hi).contains(&fixed),
        "fixed-horizon power {fixed}"
    );
    assert!(
        (av_lo..=av_hi).contains(&always_at_end),
        "always-valid power at the end {always_at_end}"
    );
}

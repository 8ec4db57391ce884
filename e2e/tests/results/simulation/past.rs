//! The over-time view's past, and who is excluded. Events are written hour by hour, as
//! they happen; after each hour every row of the hours already over is checked against
//! counts the test computes from the events itself, and against what it read before:
//!
//! - a conversion counts in the hour it happened, the visitor's first at or after their
//!   first exposure, if inside their window (one before the exposure or after the window
//!   changes nothing);
//! - a visitor counts in their first arm until the hour they see a second, then in
//!   `__multiple__`;
//! - an hour's row never changes once every event before its end is in;
//! - a visitor is excluded by a bot's or a test's exposure, never by a conversion sent
//!   from a server (a User-Agent that reads as a bot).

use super::*;
use schema::ResultsOverTimeRow;

/// The first simulated hour's start (2025-11-23 00:00 UTC), and how many hours of events.
const START_MS: i64 = 1_763_856_000_000;
const HOURS: i64 = 27;
const HOUR_MS: i64 = 3_600_000;
const WINDOW_HOURS: i64 = 6;
const ARMS: [&str; 2] = ["var_a", "var_b"];

/// One visitor's events: `(time, name, variant)`.
type Visitor = Vec<(i64, &'static str, &'static str)>;

/// Visitors first exposed over ten hours, some converting before their exposure, inside
/// their window and after it, some seeing the other arm later.
fn visitors(rng: &mut Rng) -> Vec<Visitor> {
    (0..600)
        .map(|_| {
            let arm = rng.range(0, 1) as usize;
            let (own, other) = (ARMS[arm], ARMS[1 - arm]);
            let t0 = START_MS + 1 + (rng.uniform() * 10.0 * HOUR_MS as f64) as i64;
            let within = |rng: &mut Rng, from: i64, hours: f64| {
                from + 1 + (rng.uniform() * hours * HOUR_MS as f64) as i64
            };
            let mut events = vec![(t0, "impression", own)];
            for _ in 0..rng.range(0, 2) {
                events.push((within(rng, t0, 8.0), "impression", own));
            }
            if rng.bernoulli(0.1) {
                events.push((within(rng, t0 + HOUR_MS, 8.0), "impression", other));
            }
            if rng.bernoulli(0.2) {
                let before = t0 - 1 - (rng.uniform() * (t0 - START_MS - 1) as f64) as i64;
                events.push((before, "conversion", ""));
            }
            for _ in 0..rng.range(0, 2) {
                if rng.bernoulli(0.4) {
                    events.push((within(rng, t0, WINDOW_HOURS as f64), "conversion", own));
                }
            }
            if rng.bernoulli(0.3) {
                let after = within(rng, t0 + WINDOW_HOURS * HOUR_MS, 10.0);
                events.push((after, "conversion", own));
            }
            events
        })
        .collect()
}

/// What `experiment_variant_counts_over_time` counts for an arm at the end of an hour.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Counts {
    exposed: u64,
    converted: u64,
    mature: u64,
    mature_converted: u64,
}

/// The counts per arm at the end of the hour that ends at `end`, from the rule itself.
fn expected(visitors: &[Visitor], end: i64) -> BTreeMap<String, Counts> {
    let window = WINDOW_HOURS * HOUR_MS;
    let mut counts: BTreeMap<String, Counts> = BTreeMap::new();
    for events in visitors {
        let exposures = || {
            events
                .iter()
                .filter(|(t, name, _)| *name == "impression" && *t < end)
        };
        let Some(&(t0, _, first)) = exposures().min_by_key(|(t, _, _)| *t) else {
            continue;
        };
        let arm = if exposures().any(|(_, _, v)| *v != first) {
            "__multiple__"
        } else {
            first
        };
        let conversion = events
            .iter()
            .filter(|(t, name, _)| *name == "conversion" && *t >= t0)
            .map(|(t, _, _)| *t)
            .min()
            .filter(|c| *c <= t0 + window);
        let c = counts.entry(arm.to_owned()).or_default();
        c.exposed += 1;
        c.converted += u64::from(conversion.is_some_and(|c| c < end));
        if t0 + window < end {
            c.mature += 1;
            c.mature_converted += u64::from(conversion.is_some());
        }
    }
    counts
}

/// A row's figures that must never change once its hour is over.
fn figures(row: &ResultsOverTimeRow) -> Vec<Option<f64>> {
    let counts = [
        row.exposed,
        row.converted,
        row.mature_visitors,
        row.mature_converted,
    ];
    counts
        .iter()
        .map(|n| Some(*n as f64))
        .chain([
            row.diff,
            row.ci_low,
            row.ci_high,
            row.p_value,
            row.srm_p_value,
            row.always_valid_p_value,
            row.always_valid_ci_low,
            row.always_valid_ci_high,
            row.mature_p_value,
            row.mature_always_valid_p_value,
        ])
        .collect()
}

fn same(a: &[Option<f64>], b: &[Option<f64>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-12 * x.abs().max(1.0),
            (None, None) => true,
            _ => false,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hours_row_never_changes_and_counts_what_happened_by_its_end() {
    let mut db = Database::new().await;
    db.define_windowed(
        &[Definition {
            experiment: "exp_past".to_owned(),
            phase: 1,
            variants: vec![
                ("var_a".to_owned(), 50.0, true),
                ("var_b".to_owned(), 50.0, false),
            ],
        }],
        WINDOW_HOURS as f64,
    )
    .await;
    let visitors = visitors(&mut Rng::new(20_261_129));
    let mut seen: BTreeMap<(u32, String), Vec<Option<f64>>> = BTreeMap::new();
    let (mut wrong, mut changed, mut checked) = (Vec::new(), Vec::new(), 0);
    for hour in 0..HOURS {
        let (start, end) = (START_MS + hour * HOUR_MS, START_MS + (hour + 1) * HOUR_MS);
        let events: Vec<Event> = visitors
            .iter()
            .enumerate()
            .flat_map(|(v, events)| events.iter().map(move |e| (v, e)))
            .filter(|(_, (t, _, _))| (start..end).contains(t))
            .map(|(v, (t, name, variant))| Event {
                name,
                experiment: "exp_past".to_owned(),
                variant: (*variant).to_owned(),
                session: format!("past-v{v}"),
                visitor: format!("past-v{v}"),
                phase: 1,
                time_ms: *t,
                time_on_page: None,
                bot: false,
            })
            .collect();
        if !events.is_empty() {
            db.events(&events).await;
        }
        let rows: Vec<ResultsOverTimeRow> = db
            .client
            .query(&format!(
                "SELECT ?fields FROM experiment_results_over_time \
                 WHERE public_key = '{KEY}' AND experiment_id = 'exp_past' \
                 AND hour < toDateTime({}) ORDER BY hour, variant_id",
                end / 1000
            ))
            .fetch_all()
            .await
            .expect("experiment_results_over_time");
        // The hours over before this one: the same rows as read then.
        let earlier: BTreeMap<_, _> = rows
            .iter()
            .filter(|r| i64::from(r.hour) * 1000 < start)
            .map(|r| ((r.hour, r.variant_id.clone()), figures(r)))
            .collect();
        // The rows of the hours over before this one, as read then.
        let before = &seen;
        if earlier.keys().ne(before.keys()) {
            changed.push(format!(
                "after hour {hour}: rows {:?}, were {:?}",
                earlier.keys(),
                before.keys()
            ));
        }
        for (key, figures) in &earlier {
            if let Some(was) = before.get(key).filter(|was| !same(was, figures)) {
                changed.push(format!(
                    "after hour {hour}: {key:?} reads {figures:?}, read {was:?}"
                ));
            }
        }
        // This hour's rows: the counts of the rule.
        let counts = expected(&visitors, end);
        for row in rows.iter().filter(|r| i64::from(r.hour) * 1000 == start) {
            let want = counts.get(&row.variant_id).copied().unwrap_or_default();
            let got = Counts {
                exposed: row.exposed,
                converted: row.converted,
                mature: row.mature_visitors,
                mature_converted: row.mature_converted,
            };
            checked += 1;
            if got != want {
                wrong.push(format!(
                    "hour {hour}, {}: {got:?}, the rule: {want:?}",
                    row.variant_id
                ));
            }
            seen.insert((row.hour, row.variant_id.clone()), figures(row));
        }
    }
    let last = expected(&visitors, START_MS + HOURS * HOUR_MS);
    assert!(
        last.get("__multiple__").is_some_and(|c| c.exposed > 20)
            && last.values().map(|c| c.converted).sum::<u64>() > 100,
        "the simulation has visitors in two arms and conversions: {last:?}"
    );
    assert!(checked > 40, "{checked} rows checked");
    assert!(
        changed.is_empty(),
        "past rows changed:\n{}",
        changed.join("\n")
    );
    assert!(
        wrong.is_empty(),
        "{} of {checked} rows:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// A conversion sent from a site's backend (python-requests: a bot's User-Agent) counts;
/// a visitor exposed by a bot's request does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversion_from_a_server_counts_and_a_bots_exposure_excludes() {
    let mut db = Database::new().await;
    db.define(&[Definition {
        experiment: "exp_server".to_owned(),
        phase: 1,
        variants: vec![
            ("var_a".to_owned(), 50.0, true),
            ("var_b".to_owned(), 50.0, false),
        ],
    }])
    .await;
    let mut events = Vec::new();
    let mut want: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for v in 0..200_i64 {
        let variant = ARMS[(v % 2) as usize];
        let event = |name, time_ms, bot| Event {
            name,
            experiment: "exp_server".to_owned(),
            variant: variant.to_owned(),
            session: format!("server-v{v}"),
            visitor: format!("server-v{v}"),
            phase: 1,
            time_ms,
            time_on_page: None,
            bot,
        };
        let t0 = START_MS + v * 1_000;
        // A quarter exposed by a bot; of the rest, a third converting through the backend.
        let exposed_by_bot = v % 4 == 3;
        let converts = v % 3 == 0;
        events.push(event("impression", t0, exposed_by_bot));
        if converts {
            events.push(event("conversion", t0 + 60_000, true));
        }
        if !exposed_by_bot {
            let arm = want.entry(variant).or_default();
            arm.0 += 1;
            arm.1 += u64::from(converts);
        }
    }
    db.events(&events).await;
    let rows = db.results("AND experiment_id = 'exp_server'").await;
    let got: BTreeMap<&str, (u64, u64)> = rows
        .iter()
        .map(|r| (r.variant_id.as_str(), (r.exposed, r.converted)))
        .collect();
    assert_eq!(got, want, "(exposed, converted) per arm");
}

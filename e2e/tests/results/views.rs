//! The answer for analysts: `experiment_results` against sessions of known outcome posted
//! through the real ingest (with retries, redeliveries, test traffic, conversions before
//! exposure and a session that saw two variants), checked against statistics computed
//! here independently; and `experiment_variants` following the snapshot.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::{ConsumerNames, SnapshotFile};
use rdkafka::Message;
use schema::ResultsRow;
use serde_json::{Value, json};
use statrs::distribution::{ChiSquared, ContinuousCDF, Normal, StudentsT};

const KEY: &str = "pk_results";
const WAIT: Duration = Duration::from_secs(60);

fn snapshot(version: &str, ab_phase: u32, ab_weights: (u32, u32)) -> Value {
    let variant = |id: &str, weight: u32, control: bool| json!({ "id": id, "weight": weight, "control": control, "parts": { "cta": id } });
    json!({
        "version": version,
        "experiments": [
            { "id": "exp_ab", "phase": ab_phase, "status": "live",
              "variants": [variant("var_a", ab_weights.0, true), variant("var_b", ab_weights.1, false)] },
            { "id": "exp_abc", "status": "live", "conversionWindowHours": 72,
              "sequentialTuning": 8000,
              "variants": [variant("var_x", 50, true), variant("var_y", 25, false), variant("var_z", 25, false)] }
        ],
        "keys": [{ "publicKey": KEY, "experiments": ["exp_ab", "exp_abc"] }]
    })
}

/// How a session ends.
#[derive(Clone, Copy, PartialEq)]
enum Outcome {
    Nothing,
    /// A `conversion` event after the impression.
    Converts,
    /// A `click` with `conversion: true` after the impression.
    ConvertsByFlag,
    /// A `conversion` event stamped before the impression: not a conversion of it.
    ConvertsBefore,
}

/// One session's batch: its impressions (one per variant), then the outcome, stamped with
/// the client's clock (`timestamp`, `sentAt`), which sets their order to the millisecond.
/// Its visitor is `visitor-<session>`; [`later_session`] moves events to another session
/// of the same visitor.
fn session_batch(
    experiment: &str,
    session: &str,
    variants: &[&str],
    outcome: Outcome,
    test: bool,
    time_on_page: Option<f64>,
) -> Value {
    let now = contract::event::now_millis();
    let event = |name: &str, variant: &str, at: i64| {
        json!({ "eventId": uuid::Uuid::now_v7().to_string(), "eventName": name,
                "experimentId": experiment, "sessionId": session, "variantId": variant,
                "visitorId": format!("visitor-{session}"), "timestamp": at, "test": test })
    };
    let mut events: Vec<Value> = variants
        .iter()
        .enumerate()
        .map(|(i, v)| event("impression", v, now - 10_000 + i as i64))
        .collect();
    if let Some(seconds) = time_on_page {
        events[0]["timeOnPage"] = json!(seconds);
    }
    let last = variants[variants.len() - 1];
    match outcome {
        Outcome::Nothing => {}
        Outcome::Converts => events.push(event("conversion", last, now - 5_000)),
        Outcome::ConvertsByFlag => {
            let mut click = event("click", last, now - 5_000);
            click["conversion"] = json!(true);
            events.push(click);
        }
        Outcome::ConvertsBefore => events.push(event("conversion", last, now - 20_000)),
    }
    json!({ "sentAt": now, "events": events })
}

/// `(experiment, variant) -> (exposed, converted)` and each session's time on page as
/// built, and the batches to post.
struct Plan {
    expected: BTreeMap<(&'static str, &'static str), (u64, u64)>,
    times: BTreeMap<&'static str, Vec<f64>>,
    batches: Vec<Value>,
}

impl Plan {
    fn new() -> Self {
        Self {
            expected: BTreeMap::new(),
            times: BTreeMap::new(),
            batches: Vec::new(),
        }
    }

    /// `sessions` sessions of one variant, `outcome(i)` for the i-th.
    fn add(
        &mut self,
        experiment: &'static str,
        variant: &'static str,
        sessions: usize,
        outcome: impl Fn(usize) -> Outcome,
    ) {
        for i in 0..sessions {
            let o = outcome(i);
            let session = format!("{experiment}-{variant}-{i}");
            // Seconds on the page, a different spread per variant.
            let seconds = (variant.len() + i % (11 + variant.len() % 7)) as f64 * 1.5;
            self.times.entry(variant).or_default().push(seconds);
            let mut batch =
                session_batch(experiment, &session, &[variant], o, false, Some(seconds));
            // Every other outcome comes in a later session of the visitor: still theirs.
            if o != Outcome::Nothing && i % 2 == 1 {
                let later = later_session(&mut batch, 1);
                self.batches.push(later);
            }
            self.batches.push(batch);
            let entry = self.expected.entry((experiment, variant)).or_default();
            entry.0 += 1;
            entry.1 += u64::from(matches!(o, Outcome::Converts | Outcome::ConvertsByFlag));
        }
    }
}

/// The batch with its events from index `from` on moved to a second session of the same
/// visitor, sent in a batch of their own: a visitor's conversion in a later session.
fn later_session(batch: &mut Value, from: usize) -> Value {
    let events = batch["events"].as_array_mut().expect("events");
    let mut moved = events.split_off(from);
    for event in &mut moved {
        let session = event["sessionId"].as_str().expect("session").to_owned();
        event["sessionId"] = json!(format!("{session}-later"));
    }
    json!({ "sentAt": batch["sentAt"], "events": moved })
}

async fn results(client: &clickhouse::Client, phase: u32) -> Vec<ResultsRow> {
    client
        .query(
            "SELECT ?fields FROM experiment_results WHERE public_key = ? AND phase = ? ORDER BY experiment_id, variant_id",
        )
        .bind(KEY)
        .bind(phase)
        .fetch_all()
        .await
        .expect("experiment_results")
}

fn close(what: &str, got: Option<f64>, want: Option<f64>) {
    match (got, want) {
        (Some(g), Some(w)) => assert!(
            g == w || (g - w).abs() <= 1e-9 * g.abs().max(w.abs()),
            "{what}: got {g}, want {w}"
        ),
        (g, w) => assert_eq!(g, w, "{what}"),
    }
}

/// The statistics of one row, computed here from the counts.
fn check_row(
    row: &ResultsRow,
    control: (u64, u64),
    weights: &BTreeMap<&str, f64>,
    all: &[&ResultsRow],
) {
    let what = |field: &str| format!("{} {} {field}", row.experiment_id, row.variant_id);
    let rate = |(n, c): (u64, u64)| c as f64 / n as f64;
    let p = rate((row.exposed, row.converted));
    close(&what("rate"), Some(row.conversion_rate), Some(p));
    let comparable = row.variant_id != "__multiple__";
    let (diff, low, high, p_value) = if !comparable {
        (None, None, None, None)
    } else if row.is_control == 1 {
        // No zero-width interval: the control has none.
        (Some(0.0), None, None, None)
    } else {
        let p0 = rate(control);
        let diff = p - p0;
        let (n1, x1, n0, x0) = (row.exposed, row.converted, control.0, control.1);
        // Both arms with variance, and the minimum-data guard.
        let testable = 0 < x1
            && x1 < n1
            && 0 < x0
            && x0 < n0
            && n1.min(n0) >= schema::MIN_VISITORS
            && x1 + x0 >= schema::MIN_CONVERSIONS
            && (n1 + n0) - (x1 + x0) >= schema::MIN_CONVERSIONS;
        if testable {
            let se = (p * (1.0 - p) / n1 as f64 + p0 * (1.0 - p0) / n0 as f64).sqrt();
            // The test under its null: one pooled rate.
            let pooled = (x1 + x0) as f64 / (n1 + n0) as f64;
            let se_null = (pooled * (1.0 - pooled) * (1.0 / n1 as f64 + 1.0 / n0 as f64)).sqrt();
            let normal = Normal::standard();
            let z = normal.inverse_cdf(0.975);
            (
                Some(diff),
                Some(diff - z * se),
                Some(diff + z * se),
                Some(2.0 * normal.sf((diff / se_null).abs())),
            )
        } else {
            (Some(diff), None, None, None)
        }
    };
    close(&what("diff"), row.diff, diff);
    close(&what("ci_low"), row.ci_low, low);
    close(&what("ci_high"), row.ci_high, high);
    close(&what("p_value"), row.p_value, p_value);

    // Sample ratio: the defined variants' exposed sessions against their weights.
    let observed: Vec<(f64, f64)> = weights
        .iter()
        .map(|(variant, w)| {
            let n = all
                .iter()
                .find(|r| r.variant_id == *variant)
                .map_or(0, |r| r.exposed);
            (n as f64, *w)
        })
        .collect();
    let total: f64 = observed.iter().map(|(n, _)| n).sum();
    let weight: f64 = observed.iter().map(|(_, w)| w).sum();
    let chi2: f64 = observed
        .iter()
        .map(|(n, w)| {
            let e = total * w / weight;
            (n - e) * (n - e) / e
        })
        .sum();
    let df = (observed.len() - 1) as f64;
    let srm = ChiSquared::new(df).expect("df").sf(chi2);
    close(&what("srm_p_value"), row.srm_p_value, Some(srm));
}

/// The services of the story below, its snapshot file, and phase 1's rows once stored.
struct Views {
    file: SnapshotFile,
    names: ConsumerNames,
    consumer: e2e::Running,
    stats: std::sync::Arc<consumer::Stats>,
    ingest: e2e::Running,
    http: reqwest::Client,
    ch: clickhouse::Client,
}

impl Views {
    /// A batch of the site's as a browser sends it.
    fn request(&self, batch: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(self.ingest.url("/api/v1/analytics"))
            .header("X-public-key", KEY)
            .json(batch)
    }

    async fn post(&self, batch: &Value) -> reqwest::Response {
        self.request(batch).send().await.expect("ingest answers")
    }

    fn inserted(&self) -> u64 {
        self.stats
            .rows_inserted
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn metrics(&self) -> String {
        e2e::metrics_text(&self.ingest.url("/metrics")).await
    }

    /// The snapshot changes refused so far by the consumer and by the ingest. (Both run
    /// in this process: one /metrics text has both services' counters.)
    async fn refused(&self) -> (f64, f64) {
        let text = self.metrics().await;
        let of = |service: &str| {
            let name = format!("{service}_snapshot_reloads_total{{result=\"invalid\"}}");
            e2e::metric(&text, &name).unwrap_or(0.0)
        };
        (of("consumer"), of("ingest"))
    }

    /// Replaces the snapshot with `document` and waits until both services refused it.
    async fn refused_by_both(&self, document: &Value, what: &str) {
        let before = self.refused().await;
        self.file.replace(document);
        e2e::eventually(WAIT, what, || async {
            let now = self.refused().await;
            (now.0 > before.0 && now.1 > before.1).then_some(())
        })
        .await;
    }
}

/// A 50/50 experiment with a deliberate sample-ratio mismatch (120 against 80), and a
/// 50/25/25 one; test sessions left out, and one visitor who saw both variants set apart.
fn the_plan() -> Plan {
    let mut plan = Plan::new();
    plan.add("exp_ab", "var_a", 120, |i| match i % 8 {
        0 => Outcome::Converts,
        4 => Outcome::ConvertsByFlag,
        _ => Outcome::Nothing,
    });
    plan.add("exp_ab", "var_b", 80, |i| match i % 5 {
        0 | 1 => Outcome::Converts,
        2 => Outcome::ConvertsBefore,
        _ => Outcome::Nothing,
    });
    plan.add("exp_abc", "var_x", 60, |i| {
        if i % 10 == 0 {
            Outcome::Converts
        } else {
            Outcome::Nothing
        }
    });
    plan.add("exp_abc", "var_y", 30, |i| {
        if i % 10 < 3 {
            Outcome::Converts
        } else {
            Outcome::Nothing
        }
    });
    plan.add("exp_abc", "var_z", 31, |i| {
        if i % 10 == 9 {
            Outcome::ConvertsBefore
        } else if i % 10 == 0 {
            Outcome::Converts
        } else {
            Outcome::Nothing
        }
    });
    for i in 0..3 {
        let session = format!("tester-{i}");
        let batch = session_batch(
            "exp_ab",
            &session,
            &["var_b"],
            Outcome::Converts,
            true,
            Some(1e6),
        );
        plan.batches.push(batch);
    }
    // A visitor who saw var_a in one session and var_b in the next.
    let mut both = session_batch(
        "exp_ab",
        "both",
        &["var_a", "var_b"],
        Outcome::Converts,
        false,
        None,
    );
    plan.batches.push(later_session(&mut both, 1));
    plan.batches.push(both);
    plan.expected.insert(("exp_ab", "__multiple__"), (1, 1));
    plan
}

/// Sends the plan as clients and Kafka would deliver it: some batches retried whole (same
/// eventIds, a later sentAt), crawlers and automated browsers beside (stored, flagged,
/// left out of the results), and some messages delivered twice, byte for byte. Returns
/// once every row is stored.
async fn deliver(views: &Views, plan: &Plan) {
    let mut unique_events = 0;
    for batch in &plan.batches {
        let response = views.post(batch).await;
        assert_eq!(
            response.status(),
            202,
            "{}",
            response.text().await.unwrap_or_default()
        );
        unique_events += batch["events"].as_array().expect("events").len();
    }
    let mut copies = 0;
    for batch in plan.batches.iter().step_by(7) {
        let mut again = batch.clone();
        again["sentAt"] = json!(batch["sentAt"].as_i64().expect("sentAt") + 1_500);
        assert_eq!(views.post(&again).await.status(), 202);
        copies += batch["events"].as_array().expect("events").len();
    }
    for (i, agent) in [
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
         HeadlessChrome/156.0.0.0 Safari/537.36",
    ]
    .into_iter()
    .enumerate()
    {
        let batch = session_batch(
            "exp_ab",
            &format!("bot-{i}"),
            &["var_b"],
            Outcome::Converts,
            false,
            None,
        );
        let response = views
            .request(&batch)
            .header("User-Agent", agent)
            .send()
            .await
            .expect("ingest answers");
        assert_eq!(response.status(), 202);
        unique_events += 2;
    }
    let published = e2e::read_topic(&views.names.topic, unique_events + copies, WAIT).await;
    let redelivered: Vec<(Option<&[u8]>, &[u8])> = published
        .iter()
        .step_by(5)
        .map(|m| (m.key(), m.payload().expect("payload")))
        .collect();
    e2e::produce_all(&e2e::kafka_brokers(), &views.names.topic, &redelivered).await;
    copies += redelivered.len();
    let stored = (unique_events + copies) as u64;
    e2e::eventually(WAIT, &format!("{stored} rows inserted"), || async {
        (views.inserted() >= stored).then_some(())
    })
    .await;
}

/// The weights of each experiment's variants, exp_ab's given.
fn weights(experiment: &str, ab: (f64, f64)) -> BTreeMap<&'static str, f64> {
    match experiment {
        "exp_ab" => BTreeMap::from([("var_a", ab.0), ("var_b", ab.1)]),
        _ => BTreeMap::from([("var_x", 50.0), ("var_y", 25.0), ("var_z", 25.0)]),
    }
}

/// Every row's statistics against those computed here, exp_ab on `ab`.
fn check_all(rows: &[ResultsRow], ab: (f64, f64)) {
    for row in rows {
        let all: Vec<&ResultsRow> = rows
            .iter()
            .filter(|r| r.experiment_id == row.experiment_id)
            .collect();
        let control = all
            .iter()
            .find(|r| r.is_control == 1)
            .map(|r| (r.exposed, r.converted))
            .expect("a control row");
        assert_eq!(
            row.is_control == 1,
            ["var_a", "var_x"].contains(&row.variant_id.as_str()),
            "{row:?}"
        );
        check_row(row, control, &weights(&row.experiment_id, ab), &all);
    }
}

/// The visitors of each variant counted once per phase, and every statistic equal to one
/// computed here; weights change only with a new phase, which counts its own visitors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_count_visitors_once_per_phase_and_match_independent_statistics() {
    let file = SnapshotFile::new(&snapshot("r-1", 1, (50, 50)));
    let names = ConsumerNames::unique();
    let snapshot_flag = format!("--experiments-snapshot={}", file.path.display());
    let (consumer, stats) = e2e::start_consumer_counted(e2e::consumer_config(
        &names,
        &[&snapshot_flag, "--snapshot-poll-interval-ms=100"],
    ))
    .await;
    let ingest = e2e::start_ingest(e2e::ingest_config(&file.path, &names.topic, &[])).await;
    let ch = e2e::clickhouse(&names.database);
    let views = Views {
        file,
        names,
        consumer,
        stats,
        ingest,
        http: reqwest::Client::new(),
        ch,
    };
    let plan = the_plan();
    deliver(&views, &plan).await;

    let mut steps = e2e::Steps::default();
    let rows = results(&views.ch, 1).await;
    steps
        .run(
            "phase 1",
            phase_one_counts_and_statistics(&views, &plan, &rows),
        )
        .await;
    steps
        .run(
            "weights without a phase",
            views.refused_by_both(&snapshot("r-2", 1, (60, 40)), "the weight change refused"),
        )
        .await;
    steps
        .run("phase 2", a_new_phase_counts_its_own(&views, &rows))
        .await;
    // A new phase under the same version is refused as well: the stored definitions are
    // kept per version, so phase 2's would be overwritten.
    steps
        .run(
            "a phase under the same version",
            views.refused_by_both(
                &snapshot("r-3", 3, (60, 40)),
                "a phase raised under the same version refused",
            ),
        )
        .await;
    steps
        .run("window and tuning", the_window_and_tuning_arrive(&views))
        .await;
    let Views {
        names,
        consumer,
        ingest,
        ..
    } = views;
    ingest.stop().await.expect("ingest stops");
    consumer.stop().await.expect("clean stop");
    e2e::drop_database(&names.database).await;
    steps.end();
}

/// Phase 1: the bots stored and flagged, each variant's visitors and conversions, their
/// statistics, the mismatch seen, and the command's figures.
async fn phase_one_counts_and_statistics(views: &Views, plan: &Plan, rows: &[ResultsRow]) {
    let bots: u64 = views
        .ch
        .query("SELECT uniqExact(event_id) FROM events WHERE is_bot = 1")
        .fetch_one()
        .await
        .expect("bots");
    assert_eq!(bots, 4, "the bots' events are stored, flagged");
    let got: BTreeMap<(String, String), (u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                (r.experiment_id.clone(), r.variant_id.clone()),
                (r.exposed, r.converted),
            )
        })
        .collect();
    let want: BTreeMap<(String, String), (u64, u64)> = plan
        .expected
        .iter()
        .map(|((e, v), c)| ((e.to_string(), v.to_string()), *c))
        .collect();
    assert_eq!(got, want, "exposed and converted sessions per variant");
    check_all(rows, (50.0, 50.0));
    let ab = rows
        .iter()
        .find(|r| r.variant_id == "var_b")
        .expect("var_b");
    assert!(
        ab.srm_p_value.expect("srm") < 0.01,
        "the mismatch is seen: {ab:?}"
    );
    check_command(&views.ch, plan, rows).await;
}

/// With a new phase the weights are taken; phase 1 keeps its weights, so 120 against 80
/// stays a mismatch there, and phase 2 counts its own visitors against 60/40: 6 of var_a
/// and 4 of var_b, half saying their phase, half leaving it to the ingest, which has the
/// live one once it reloaded r-3.
async fn a_new_phase_counts_its_own(views: &Views, phase_one: &[ResultsRow]) {
    views.file.replace(&snapshot("r-3", 2, (60, 40)));
    e2e::eventually(WAIT, "version r-3 in experiment_variants_current", || async {
        let version: String = views
            .ch
            .query(
                "SELECT any(version) FROM experiment_variants_current WHERE experiment_id = 'exp_ab'",
            )
            .fetch_one()
            .await
            .ok()?;
        (version == "r-3").then_some(())
    })
    .await;
    let again = results(&views.ch, 1).await;
    check_all(&again, (50.0, 50.0));
    assert_eq!(again[0].srm_p_value, phase_one[0].srm_p_value);
    e2e::eventually(WAIT, "the ingest in phase 2", || async {
        let text = views.metrics().await;
        (e2e::metric(&text, "ingest_snapshot_info{version=\"r-3\"}") == Some(1.0)).then_some(())
    })
    .await;
    let before = views.inserted();
    for (variant, n) in [("var_a", 6), ("var_b", 4)] {
        for i in 0..n {
            let mut batch = session_batch(
                "exp_ab",
                &format!("p2-{variant}-{i}"),
                &[variant],
                Outcome::Nothing,
                false,
                None,
            );
            if i % 2 == 0 {
                batch["events"][0]["phase"] = json!(2);
            }
            assert_eq!(views.post(&batch).await.status(), 202);
        }
    }
    e2e::eventually(WAIT, "phase 2 rows inserted", || async {
        (views.inserted() >= before + 10).then_some(())
    })
    .await;
    let second = results(&views.ch, 2).await;
    let ab: Vec<&ResultsRow> = second
        .iter()
        .filter(|r| r.experiment_id == "exp_ab")
        .collect();
    assert_eq!(
        ab.iter()
            .map(|r| (r.variant_id.as_str(), r.exposed))
            .collect::<Vec<_>>(),
        [("var_a", 6), ("var_b", 4)]
    );
    let srm = ab[0].srm_p_value.expect("srm");
    assert!((srm - 1.0).abs() < 1e-12, "6 against 4 on 60/40: {srm}");
}

/// The snapshot's window and tuning reach the definitions and the results; the old
/// version stays queryable, the refused one never came.
async fn the_window_and_tuning_arrive(views: &Views) {
    let settings: (f64, f64) = views
        .ch
        .query(
            "SELECT any(conversion_window_hours), any(sequential_tuning) \
             FROM experiment_variants FINAL WHERE experiment_id = 'exp_abc'",
        )
        .fetch_one()
        .await
        .expect("definitions");
    assert_eq!(settings, (72.0, 8000.0));
    let tunings: Vec<f64> = views
        .ch
        .query("SELECT DISTINCT sequential_tuning FROM experiment_results WHERE experiment_id = 'exp_abc'")
        .fetch_all()
        .await
        .expect("results");
    assert_eq!(tunings, [8000.0], "exp_abc's N* from the snapshot");
    let versions: u64 = views
        .ch
        .query("SELECT uniqExact(version) FROM experiment_variants WHERE experiment_id = 'exp_ab'")
        .fetch_one()
        .await
        .expect("versions");
    assert_eq!(
        versions, 2,
        "the old version stays queryable, the refused one never came"
    );
}

fn mean_and_variance(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let variance = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, variance)
}

/// The command's report: lift and Welch's test computed here, guards below the minimums.
async fn check_command(ch: &clickhouse::Client, plan: &Plan, rows: &[ResultsRow]) {
    let settings = tools::results::Settings {
        minimums: tools::stats::Minimums {
            visitors: 50,
            conversions: 5,
        },
        correction: tools::stats::Correction::Holm,
    };
    let ab = tools::results::report(ch, "exp_ab", Some(KEY), settings)
        .await
        .expect("report");
    assert_eq!(ab.len(), 1);
    // The one visitor who saw both arms, of 201: below the warning's 10 visitors and 1%.
    assert_eq!(
        ab[0].multiple_exposures,
        tools::results::MultipleExposures {
            visitors: 1,
            share: 1.0 / 201.0,
            warning: false
        }
    );
    let b = ab[0]
        .variants
        .iter()
        .find(|v| v.variant_id == "var_b")
        .expect("var_b");
    let compared = b.comparison.as_ref().expect("var_b is compared");
    assert!(compared.enough_data);
    let row = |v: &str| rows.iter().find(|r| r.variant_id == v).expect("row");
    let (x1, x0) = (row("var_b").converted as f64, row("var_a").converted as f64);
    // The lift and its interval on the log of the ratio (delta method).
    let log_ratio = (x1 / 80.0).ln() - (x0 / 120.0).ln();
    let se = (1.0 / x1 - 1.0 / 80.0 + 1.0 / x0 - 1.0 / 120.0).sqrt();
    let z = Normal::standard().inverse_cdf(0.975);
    let got = compared.lift.value().expect("lift");
    close("lift", Some(got.value), Some(log_ratio.exp() - 1.0));
    close(
        "lift low",
        Some(got.low),
        Some((log_ratio - z * se).exp() - 1.0),
    );
    close(
        "lift high",
        Some(got.high),
        Some((log_ratio + z * se).exp() - 1.0),
    );

    let (ma, va) = mean_and_variance(&plan.times["var_a"]);
    let (mb, vb) = mean_and_variance(&plan.times["var_b"]);
    let (sa, sb) = (va / 120.0, vb / 80.0);
    let t = (mb - ma) / (sa + sb).sqrt();
    let df = (sa + sb).powi(2) / (sa * sa / 119.0 + sb * sb / 79.0);
    let welch = 2.0 * StudentsT::new(0.0, 1.0, df).expect("t").sf(t.abs());
    let time = b.time_on_page.as_ref().expect("time on page");
    assert_eq!(time.visitors, 80, "test visitors left out");
    close("mean time", Some(time.mean), Some(mb));
    let test = time.test.as_ref().and_then(|t| t.value()).expect("welch");
    close("time diff", Some(test.diff), Some(mb - ma));
    close("welch p", Some(test.p_value), Some(welch));

    // 30 visitors of var_y: below the minimums, no statistic, said so.
    let abc = tools::results::report(ch, "exp_abc", Some(KEY), settings)
        .await
        .expect("report");
    let y = abc[0]
        .variants
        .iter()
        .find(|v| v.variant_id == "var_y")
        .expect("var_y");
    let compared = y.comparison.as_ref().expect("var_y is compared");
    assert!(!compared.enough_data);
    assert_eq!(
        (
            compared.diff.value(),
            compared.p_value.value(),
            compared.lift.value()
        ),
        (None, None, None)
    );
    assert!(
        compared
            .diff
            .reason()
            .is_some_and(|r| r.starts_with("not enough data")),
        "{compared:?}"
    );
    assert_eq!(
        y.time_on_page
            .as_ref()
            .and_then(|t| t.test.as_ref())
            .and_then(|t| t.value()),
        None
    );
    let table = tools::results::render(&abc, settings);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("var_y") && l.contains("not enough data")),
        "{table}"
    );
    assert!(
        table.lines().any(|l| l.starts_with("var_x (control)")),
        "{table}"
    );
}

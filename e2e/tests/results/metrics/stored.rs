//! The stored values the view reads: each visitor's latest refresh, a changed definition
//! applied at the sweep, and refreshes landing during a query.

use super::*;

/// A metric changed in a later snapshot applies to the events already stored: the view
/// reads each experiment's definitions as last loaded.
#[tokio::test]
async fn a_changed_metric_applies_to_the_stored_events() {
    let db = Database::new().await;
    let events = events(3, 60);
    db.store(&events).await;
    let goal = |target: &'static str| Metric {
        id: "goal_clicks",
        role: "goal",
        kind: "proportion",
        numerator: ("conversion", target, 0, "", "any"),
        denominator: None,
        cap_value: 0.0,
        cap_percentile: 0.0,
        higher_is_better: true,
        lookback_days: 14.0,
    };
    // The share of B's visitors with a conversion on `target`, from the events.
    let share = |target: &str| {
        let visitors = |pick: &dyn Fn(&Event) -> bool| {
            let mut v: Vec<&str> = events
                .iter()
                .filter(|e| e.variant == "B" && e.experiment == EXPERIMENT && pick(e))
                .map(|e| e.visitor.as_str())
                .collect();
            v.sort_unstable();
            v.dedup();
            v.len() as f64
        };
        visitors(&|e| e.name == "conversion" && e.target == target)
            / visitors(&|e| e.name == "impression")
    };
    // Each snapshot has its own version, as the consumer writes them: the later one's
    // rows stand beside the earlier one's, not in their place.
    for (version, loaded_at, target) in [("v1", START - DAY, "signup"), ("v2", START, "purchase")] {
        db.define(&[goal(target)], version, loaded_at).await;
        let b = db
            .results()
            .await
            .into_iter()
            .find(|r| r.variant_id == "B")
            .expect("B");
        assert_eq!(b.metric_id, "goal_clicks");
        assert!(
            (b.value - share(target)).abs() < 1e-12,
            "{target}: {} against {}",
            b.value,
            share(target)
        );
    }
    assert!(
        (share("signup") - share("purchase")).abs() > 0.01,
        "the change shows"
    );
}

/// Two results of the same visitors' values: equal but for the order of float sums.
fn assert_same(what: &str, got: &[MetricResultsRow], want: &[MetricResultsRow]) {
    assert_eq!(got.len(), want.len(), "{what}: rows");
    for (g, w) in got.iter().zip(want) {
        let row = format!("{what}: {} {}", g.metric_id, g.variant_id);
        assert_eq!(
            (&g.metric_id, &g.variant_id),
            (&w.metric_id, &w.variant_id),
            "{row}"
        );
        assert_eq!(g.visitors, w.visitors, "{row}: visitors");
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * (1.0 + b.abs());
        assert!(
            close(g.value, w.value),
            "{row}: value {} against {}",
            g.value,
            w.value
        );
        for (name, a, b) in [
            ("p_value", g.p_value, w.p_value),
            ("cuped_diff", g.cuped_diff, w.cuped_diff),
            (
                "cuped_variance_reduction",
                g.cuped_variance_reduction,
                w.cuped_variance_reduction,
            ),
        ] {
            match (a, b) {
                (Some(a), Some(b)) => assert!(close(a, b), "{row}: {name} {a} against {b}"),
                (a, b) => assert_eq!(a, b, "{row}: {name}"),
            }
        }
    }
}

/// The view reads each visitor's latest refresh as it is stored, and nothing else: events
/// stored with no refresh are not counted until one; a refresh of a few visitors after new
/// events gives what storing every visitor anew gives; the same definitions loaded again
/// keep the values, a changed one applies at the sweep that follows.
#[tokio::test]
async fn results_are_those_of_each_visitors_latest_refresh() {
    let db = Database::new().await;
    let mut metrics = metrics();
    db.define(&metrics, "v1", START - DAY).await;
    let mut events = events(11, 60);
    // A visitor id that a statement must quote.
    let odd = "it's a \\ {db} visitor?".to_owned();
    for (name, target, t) in [
        ("impression", "", START),
        ("conversion", "signup", START + 1),
    ] {
        let mut e = events[0].clone();
        (e.visitor, e.variant, e.name, e.target, e.t) = (odd.clone(), "B", name, target, t);
        e.experiment = EXPERIMENT;
        e.session = "odd-session".into();
        events.push(e);
    }
    db.insert_events(&events).await;
    let stale = "SELECT count() FROM experiment_metric_stale";
    let stored = "SELECT count() FROM visitor_metric_values";
    assert_eq!(db.count(stored).await, 0);
    assert!(db.count(stale).await > 100, "every visitor is stale");
    assert!(
        db.results().await.is_empty(),
        "nothing refreshed, nothing counted"
    );

    db.sweep().await;
    assert_eq!(db.count(stale).await, 0, "the sweep stores every visitor");
    let swept = db.results().await;
    assert!(!swept.is_empty());
    // Every visitor stored anew, from nothing: what an incremental refresh must give.
    let anew = || async {
        let truncate = "TRUNCATE TABLE visitor_metric_values";
        db.client.query(truncate).execute().await.expect("truncate");
        db.sweep().await;
        db.results().await
    };

    // A later refresh of the odd visitor, its values altered: it is what the view reads.
    let alter = "INSERT INTO visitor_metric_values SELECT public_key, experiment_id, phase, \
                 visitor_id, variant_id, first_exposure_ms, metrics.metric_id, \
                 arrayMap(v -> v + 1000, metrics.value), metrics.denominator, \
                 metrics.pre_value, events_seen, settings_hash, refresh_id + 1, \
                 metrics.pre_seen FROM visitor_metric_values WHERE visitor_id = ? AND refresh_id = \
                 (SELECT max(refresh_id) FROM visitor_metric_values WHERE visitor_id = ?)";
    let alter_odd = || async {
        let query = db.client.query(alter).bind(&odd).bind(&odd);
        query.execute().await.expect("alter");
    };
    alter_odd().await;
    let altered = db.results().await;
    let b = |r: &[MetricResultsRow]| {
        r.iter()
            .find(|r| r.variant_id == "B")
            .map(|r| r.value)
            .expect("B")
    };
    assert!(b(&altered) > b(&swept) + 1.0, "the latest refresh is read");

    // An event of the visitor after the refresh: not counted until refreshed.
    let mut later = events.last().expect("events").clone();
    (later.name, later.target, later.t) = ("click", "", START + 2);
    db.insert("events", &[later.row(events.len())]).await;
    events.push(later);
    assert_eq!(db.count(stale).await, 1, "the odd visitor is stale");
    assert_same("as of the refresh", &db.results().await, &altered);
    // Stored again, for that visitor alone, as the consumer does after a batch.
    let visitor = [(KEY.to_owned(), odd.clone())];
    db.refresh(&visitor, refresh_id_of(Duration::ZERO)).await;
    assert_eq!(db.count(stale).await, 0);
    let refreshed = db.results().await;
    assert!(
        (b(&refreshed) - b(&swept)).abs() < 1.0,
        "the alteration is gone"
    );
    assert_same("refreshed, against stored anew", &refreshed, &anew().await);

    // The same definitions loaded again (a later snapshot): still fresh.
    db.insert_definitions(&metrics, "v2", START).await;
    assert_eq!(
        db.count(stale).await,
        0,
        "unchanged definitions keep the values"
    );
    // A changed definition: every visitor of the experiment is stale, and the results
    // change at the sweep.
    metrics[0].lookback_days = 0.0;
    db.insert_definitions(&metrics, "v3", START + 1).await;
    assert!(
        db.count(stale).await > 100,
        "a changed definition makes them stale"
    );
    db.sweep().await;
    assert_eq!(db.count(stale).await, 0);
    let changed = db.results().await;
    let cuped = |r: &[MetricResultsRow]| r.iter().map(|r| r.cuped_theta).collect::<Vec<_>>();
    assert_ne!(
        cuped(&changed),
        cuped(&refreshed),
        "the new lookback applies"
    );
    assert_same("changed, against stored anew", &changed, &anew().await);
}

/// Values stored under another list of metrics (a metric added since, not yet swept) give
/// the statistics of the metrics still defined as they were: the view sums them another
/// way (every value kept whole), with the same caps, and the new metric has no row.
#[tokio::test]
async fn values_stored_under_another_list_of_metrics_give_the_same_statistics() {
    let db = Database::new().await;
    let mut metrics = metrics();
    db.define(&metrics, "v1", START - DAY).await;
    db.store(&events(7, 60)).await;
    let unsorted = "SELECT countIf(metrics.metric_id != arraySort(metrics.metric_id)) \
                    FROM visitor_metric_values";
    assert_eq!(
        db.count(unsorted).await,
        0,
        "a refresh stores the metrics by id, as the view lists the definitions"
    );
    let stored = db.results().await;
    assert!(
        stored.iter().any(|r| r.p_value.is_some()),
        "the statistics are computed"
    );
    let added = Metric {
        id: "added",
        ..metrics[2].clone()
    };
    metrics.push(added);
    db.insert_definitions(&metrics, "v2", START).await;
    assert!(
        db.count("SELECT count() FROM experiment_metric_stale")
            .await
            > 100,
        "the visitors' lists of metrics are older than the definitions"
    );
    assert_same("under another list", &db.results().await, &stored);
}

/// A refresh id of `ago` before now: a refresh's id is its start, in microseconds (the
/// consumer's `Refresh::next_id`).
fn refresh_id_of(ago: Duration) -> u64 {
    let start = std::time::SystemTime::now() - ago;
    let since = start
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    since.as_millis() as u64 * 1000
}

/// Refreshes landing while a query of the view runs (some read stale: an event came after
/// them), and events landing too, neither drop a visitor nor count one twice: each query
/// sees every exposed visitor's metrics once.
#[tokio::test]
async fn refreshes_and_events_landing_during_a_query_neither_drop_nor_double_a_visitor() {
    let db = Database::new().await;
    db.define(&metrics(), "v1", START - DAY).await;
    let events = events(13, 60);
    db.store(&events).await;
    let visitors: Vec<(String, String)> = db
        .client
        .query("SELECT DISTINCT toString(public_key), visitor_id FROM events")
        .fetch_all()
        .await
        .expect("visitors");
    let rows = "SELECT count() FROM experiment_metric_visitors";
    let want = db.count(rows).await;
    assert!(want > 500, "{want} rows");

    let done = std::sync::atomic::AtomicBool::new(false);
    let running = || !done.load(std::sync::atomic::Ordering::Relaxed);
    // Refreshes of every visitor: a copy of the latest read as stale, then a real one.
    let stale_copy = "INSERT INTO visitor_metric_values SELECT public_key, experiment_id, \
         phase, visitor_id, variant_id, first_exposure_ms, metrics.metric_id, metrics.value, \
         metrics.denominator, metrics.pre_value, events_seen + 1000, settings_hash, ?, \
         metrics.pre_seen FROM visitor_metric_values \
         WHERE refresh_id = (SELECT max(refresh_id) FROM visitor_metric_values)";
    let refreshes = async {
        while running() {
            let copy = db
                .client
                .query(stale_copy)
                .bind(refresh_id_of(Duration::ZERO));
            copy.execute().await.expect("stale copy");
            db.refresh(&visitors, refresh_id_of(Duration::ZERO)).await;
        }
    };
    // A click of a visitor, after their exposure: their stored values turn stale.
    let clicks = async {
        let mut n = events.len();
        while running() {
            let mut click = events[n % events.len()].clone();
            (click.name, click.experiment, click.target) = ("click", EXPERIMENT, "");
            click.t = START + 100 * DAY;
            db.insert("events", &[click.row(n)]).await;
            n += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let queries = async {
        let mut wrong = Vec::new();
        for _ in 0..60 {
            let got = db.count(rows).await;
            if got != want {
                wrong.push(got);
            }
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        wrong
    };
    let ((), (), wrong) = tokio::join!(refreshes, clicks, queries);
    assert!(wrong.is_empty(), "{want} rows each time, not {wrong:?}");
}

//! Browser-like traffic: visitors of the snapshot's sites, each a session that shows one
//! variant, sends its events in batches of five (the client's flush size) and its last few
//! with the page-unload beacon (flat body, key in `pkey`).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use contract::event::{Envelope, EventMessage};
use contract::snapshot::Snapshot;
use http_body_util::Full;
use hyper::{Request, StatusCode, header};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// The client's flush size.
pub const BATCH_EVENTS: usize = 5;

const PATHS: &[&str] = &[
    "/",
    "/products/espresso-beans",
    "/products/pour-over-kit",
    "/checkout",
    "/cart",
    "/blog/how-to-brew-better-coffee",
    "/about",
    "/pricing",
];
const REFERRERS: &[&str] = &[
    "",
    "",
    "https://www.google.com/",
    "https://duckduckgo.com/",
    "https://news.ycombinator.com/",
    "https://t.co/x8Jk2",
];
const CLICK_TARGETS: &[&str] = &[
    "#cta",
    "button.add-to-cart",
    "a.nav-link[href=\"/pricing\"]",
    "#checkout-submit",
    "div.hero > a.button-primary",
];
const CAMPAIGNS: &[(&str, &str, &str)] = &[
    ("newsletter", "email", "black_friday_2026"),
    ("google", "cpc", "brand_search"),
    ("facebook", "social", "autumn_launch"),
];
pub const USER_AGENTS: &[&str] = &[
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/142.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.6 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (X11; Linux x86_64; rv:145.0) Gecko/20100101 Firefox/145.0",
];

/// The keys of a snapshot and, for each, its experiments and their variants.
#[derive(Debug)]
pub struct Sites(Vec<Site>);

#[derive(Debug)]
struct Site {
    key: String,
    experiments: Vec<(String, Vec<String>)>,
}

impl Sites {
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let snapshot =
            Snapshot::from_json(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let sites: Vec<Site> = snapshot
            .keys()
            .map(|entry| Site {
                key: entry.public_key.as_str().to_owned(),
                experiments: entry
                    .experiments
                    .iter()
                    .map(|&i| {
                        let e = &snapshot.experiments[i];
                        (
                            e.id.clone(),
                            e.variants.iter().map(|v| v.id.clone()).collect(),
                        )
                    })
                    .collect(),
            })
            .filter(|site| !site.experiments.is_empty())
            .collect();
        anyhow::ensure!(
            !sites.is_empty(),
            "{}: no key has experiments",
            path.display()
        );
        Ok(Self(sites))
    }
}

/// One event in the contract's client form (camelCase, optional fields left out).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientEvent {
    /// As the SDK sends it, so that a retried event is counted once.
    pub event_id: uuid::Uuid,
    pub event_name: &'static str,
    pub experiment_id: String,
    pub session_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversion: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_time: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scroll_depth: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_on_page: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub click_target: Option<&'static str>,
    pub pathname: &'static str,
    pub referrer: &'static str,
    #[serde(rename = "utm_source", skip_serializing_if = "Option::is_none")]
    pub utm_source: Option<&'static str>,
    #[serde(rename = "utm_medium", skip_serializing_if = "Option::is_none")]
    pub utm_medium: Option<&'static str>,
    #[serde(rename = "utm_campaign", skip_serializing_if = "Option::is_none")]
    pub utm_campaign: Option<&'static str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub test: bool,
}

/// One request's worth of events, as a browser would send it.
#[derive(Debug)]
pub struct Batch {
    pub key: String,
    pub user_agent: &'static str,
    /// The page-unload form: text/plain, key in the body, no `X-public-key`.
    pub beacon: bool,
    pub events: Vec<ClientEvent>,
}

impl Batch {
    /// The request body in the form the client uses for this batch.
    pub fn body(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            pkey: Option<&'a str>,
            events: &'a [ClientEvent],
        }
        let body = Body {
            pkey: self.beacon.then_some(self.key.as_str()),
            events: &self.events,
        };
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

struct Visit {
    key: String,
    experiment: String,
    variant: String,
    session_id: String,
    pathname: &'static str,
    referrer: &'static str,
    campaign: Option<(&'static str, &'static str, &'static str)>,
    user_agent: &'static str,
    test: bool,
    /// Full batches still to send before the page unloads.
    batches_left: u32,
    sent: u32,
}

/// Generates the visits of one simulated browser after another. Session ids start with
/// the run id, so the events of one run can be found in ClickHouse.
pub struct Traffic {
    sites: Arc<Sites>,
    run: String,
    rng: StdRng,
    visits: u64,
    visit: Option<Visit>,
}

impl Traffic {
    /// The traffic of worker `seed` of run `run`: the same for the same pair, and for
    /// another run other event ids too (the store keeps one event per id).
    pub fn new(sites: Arc<Sites>, run: &str, seed: u64) -> Self {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        (run, seed).hash(&mut hasher);
        Self {
            sites,
            run: run.to_owned(),
            rng: StdRng::seed_from_u64(hasher.finish()),
            visits: 0,
            visit: None,
        }
    }

    /// The next request of the current visit, starting a new visit when the last one
    /// unloaded: one to four batches of five, then a beacon with one to four events.
    pub fn next_batch(&mut self) -> Batch {
        let mut visit = match self.visit.take() {
            Some(v) => v,
            None => self.new_visit(),
        };
        let beacon = visit.batches_left == 0;
        let count = if beacon {
            self.rng.random_range(1..BATCH_EVENTS)
        } else {
            BATCH_EVENTS
        };
        let events = (0..count).map(|_| self.event(&mut visit)).collect();
        let batch = Batch {
            key: visit.key.clone(),
            user_agent: visit.user_agent,
            beacon,
            events,
        };
        if !beacon {
            visit.batches_left -= 1;
            self.visit = Some(visit);
        }
        batch
    }

    /// Events with the ingest's enrichment, as the ingest would publish them.
    pub fn next_messages(&mut self, received_at: i64) -> Vec<EventMessage> {
        let batch = self.next_batch();
        let envelope = Envelope::new(
            received_at,
            batch.key.clone(),
            batch.user_agent.to_owned(),
            None,
        );
        batch
            .events
            .iter()
            .filter_map(|e| {
                let value = serde_json::to_value(e).ok()?;
                EventMessage::from_client(&value, &envelope).ok()
            })
            .collect()
    }

    fn new_visit(&mut self) -> Visit {
        self.visits += 1;
        let rng = &mut self.rng;
        let sites = Arc::clone(&self.sites);
        let site = sites.0.choose(rng).expect("sites are not empty");
        let (experiment, variants) = site.experiments.choose(rng).expect("experiments");
        Visit {
            key: site.key.clone(),
            experiment: experiment.clone(),
            variant: variants.choose(rng).cloned().unwrap_or_default(),
            session_id: format!(
                "{}-{:08x}-{:016x}",
                self.run,
                self.visits,
                rng.random::<u64>()
            ),
            pathname: PATHS.choose(rng).copied().unwrap_or("/"),
            referrer: REFERRERS.choose(rng).copied().unwrap_or(""),
            campaign: rng
                .random_bool(0.4)
                .then(|| *CAMPAIGNS.choose(rng).expect("campaigns")),
            user_agent: USER_AGENTS.choose(rng).copied().unwrap_or(""),
            test: rng.random_bool(0.02),
            batches_left: rng.random_range(1..=4),
            sent: 0,
        }
    }

    fn event(&mut self, visit: &mut Visit) -> ClientEvent {
        let rng = &mut self.rng;
        let mut event = ClientEvent {
            event_id: uuid::Builder::from_random_bytes(rng.random()).into_uuid(),
            event_name: "impression",
            experiment_id: visit.experiment.clone(),
            session_id: visit.session_id.clone(),
            variant_id: Some(visit.variant.clone()),
            pathname: visit.pathname,
            referrer: visit.referrer,
            utm_source: visit.campaign.map(|c| c.0),
            utm_medium: visit.campaign.map(|c| c.1),
            utm_campaign: visit.campaign.map(|c| c.2),
            test: visit.test,
            ..ClientEvent::default()
        };
        visit.sent += 1;
        if visit.sent == 1 {
            return event;
        }
        match rng.random_range(0..100) {
            0..30 => {
                event.event_name = "click";
                event.click_target = CLICK_TARGETS.choose(rng).copied();
            }
            30..50 => {
                event.event_name = "scroll_depth";
                event.scroll_depth = Some(f64::from(rng.random_range(0..=100u8)));
            }
            50..65 => {
                event.event_name = "dwell_time";
                event.time_on_page = Some(f64::from(rng.random_range(500..600_000u32)));
            }
            65..75 => {
                event.event_name = "performance";
                event.load_time = Some(f64::from(rng.random_range(120..6_000u32)) + 0.5);
            }
            75..85 => event.event_name = "hover",
            85..92 => event.event_name = "add_to_cart",
            92..96 => event.event_name = "bounce",
            _ => {
                event.event_name = "conversion";
                event.conversion = Some(true);
            }
        }
        event
    }
}

/// The POST of `batch` to `path` as a browser sends it.
pub fn browser_request(path: &str, batch: &Batch) -> Request<Full<Bytes>> {
    let mut builder = Request::post(path).header(header::USER_AGENT, batch.user_agent);
    builder = if batch.beacon {
        // navigator.sendBeacon with a string: text/plain, no custom headers.
        builder.header(header::CONTENT_TYPE, "text/plain;charset=UTF-8")
    } else {
        builder
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json")
            .header(contract::key::PUBLIC_KEY_HEADER, &batch.key)
    };
    builder
        .body(Full::new(Bytes::from(batch.body())))
        .unwrap_or_else(|_| Request::new(Full::new(Bytes::new())))
}

/// The events an answer of the ingest accepted: its `accepted` count if 2xx, else none.
pub fn accepted_events(status: StatusCode, body: &[u8]) -> u64 {
    if !status.is_success() {
        return 0;
    }
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["accepted"].as_u64())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites() -> Arc<Sites> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/experiments.json");
        Arc::new(Sites::from_file(&path).expect("demo snapshot"))
    }

    #[test]
    fn visits_send_full_batches_then_one_smaller_beacon() {
        let sites = sites();
        let mut traffic = Traffic::new(sites, "t1", 7);
        let mut beacons = 0;
        let mut session = None;
        for _ in 0..200 {
            let batch = traffic.next_batch();
            let id = batch.events[0].session_id.clone();
            assert!(batch.events.iter().all(|e| e.session_id == id));
            assert!(id.starts_with("t1-"));
            if batch.beacon {
                beacons += 1;
                assert!((1..BATCH_EVENTS).contains(&batch.events.len()));
                let body: serde_json::Value = serde_json::from_slice(&batch.body()).unwrap();
                assert_eq!(body["pkey"], batch.key.as_str());
                session = None;
            } else {
                assert_eq!(batch.events.len(), BATCH_EVENTS);
                assert!(session.is_none_or(|s| s == id), "a visit keeps its session");
                assert!(!String::from_utf8(batch.body()).unwrap().contains("pkey"));
                session = Some(id);
            }
        }
        assert!(
            (20..110).contains(&beacons),
            "{beacons} beacons in 200 requests"
        );
    }

    #[test]
    fn runs_draw_their_own_event_ids() {
        let ids = |run: &str, seed: u64| {
            let mut traffic = Traffic::new(sites(), run, seed);
            (0..50)
                .flat_map(|_| traffic.next_batch().events)
                .map(|e| e.event_id)
                .collect::<std::collections::HashSet<_>>()
        };
        assert_eq!(ids("r1", 1), ids("r1", 1), "a run is repeatable");
        assert!(ids("r1", 1).is_disjoint(&ids("r2", 1)), "another run");
        assert!(ids("r1", 1).is_disjoint(&ids("r1", 2)), "another worker");
    }

    #[test]
    fn every_generated_event_passes_the_ingest_validation() {
        let sites = sites();
        let mut traffic = Traffic::new(Arc::clone(&sites), "t2", 1);
        let mut total = 0;
        for _ in 0..500 {
            let batch = traffic.next_batch();
            total += batch.events.len();
            let envelope = Envelope::new(0, batch.key.clone(), String::new(), None);
            for event in &batch.events {
                let value = serde_json::to_value(event).unwrap();
                EventMessage::from_client(&value, &envelope).expect("valid event");
            }
        }
        assert!(total > 2000);
        let mut traffic = Traffic::new(sites, "t2", 1);
        let names: std::collections::HashSet<_> = (0..300)
            .flat_map(|_| traffic.next_messages(1).into_iter().map(|m| m.event_name))
            .collect();
        assert!(names.len() >= 8, "varied event names: {names:?}");
    }
}

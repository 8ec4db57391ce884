//! The same load in the forms the peers take (`BENCH_PEERS=1 scripts/bench`): PostHog
//! capture's `/batch` body for the ingest's batches, and an Unleash feature document
//! (Unleash Edge's offline bootstrap file) of the config-api's answer.

use anyhow::Context;
use serde_json::{Map, Value, json};

use crate::traffic::Batch;

/// The batch as PostHog's `/batch` endpoint takes it: the key as `api_key`, and each
/// event with its name as `event`, its id as `uuid`, its session as `distinct_id` and
/// every other field of the contract's form among its `properties`, so that the peer
/// carries the same information.
pub fn posthog_body(batch: &Batch) -> anyhow::Result<Vec<u8>> {
    let mut events = Vec::with_capacity(batch.events.len());
    for event in &batch.events {
        let Value::Object(mut properties) = serde_json::to_value(event)? else {
            anyhow::bail!("an event is not a JSON object");
        };
        let mut take = |field: &str| {
            properties
                .remove(field)
                .with_context(|| format!("an event without {field}"))
        };
        let name = take("eventName")?;
        let uuid = take("eventId")?;
        let distinct_id = properties
            .get("sessionId")
            .cloned()
            .context("an event without sessionId")?;
        events.push(json!({
            "event": name,
            "uuid": uuid,
            "distinct_id": distinct_id,
            "properties": properties,
        }));
    }
    Ok(serde_json::to_vec(
        &json!({ "api_key": batch.key, "batch": events }),
    )?)
}

/// Unleash's client-features document (version 2) of a config-api answer: one enabled
/// feature per experiment, rolled out to everyone, whose strategy variants are the
/// experiment's variants with the same weights (scaled to Unleash's 1000) and, as a JSON
/// payload, the variant's `control` and `parts`.
pub fn unleash_features(answer: &Value) -> anyhow::Result<Value> {
    let experiments = answer
        .get("experiments")
        .and_then(Value::as_array)
        .context("the answer has no experiments array")?;
    let mut features = Vec::with_capacity(experiments.len());
    for experiment in experiments {
        let id = experiment
            .get("id")
            .and_then(Value::as_str)
            .context("an experiment without id")?;
        let variants = experiment
            .get("variants")
            .and_then(Value::as_array)
            .with_context(|| format!("{id}: no variants"))?;
        let weights: Vec<f64> = variants
            .iter()
            .map(|v| v.get("weight").and_then(Value::as_f64).unwrap_or(0.0))
            .collect();
        let scaled = scale_to_1000(&weights).with_context(|| format!("{id}: weights"))?;
        let mut unleash_variants = Vec::with_capacity(variants.len());
        for (variant, weight) in variants.iter().zip(scaled) {
            let mut payload = Map::new();
            for field in ["control", "parts"] {
                if let Some(value) = variant.get(field) {
                    payload.insert(field.to_owned(), value.clone());
                }
            }
            unleash_variants.push(json!({
                "name": variant.get("id").and_then(Value::as_str)
                    .with_context(|| format!("{id}: a variant without id"))?,
                "weight": weight,
                "weightType": "variable",
                "stickiness": "default",
                "payload": { "type": "json", "value": Value::Object(payload).to_string() },
            }));
        }
        features.push(json!({
            "name": id,
            "type": "experiment",
            "enabled": true,
            "project": "default",
            "stale": false,
            "impressionData": false,
            "strategies": [{
                "name": "flexibleRollout",
                "constraints": [],
                "parameters": { "rollout": "100", "stickiness": "default", "groupId": id },
                "variants": unleash_variants,
            }],
            "variants": [],
        }));
    }
    Ok(json!({ "version": 2, "features": features }))
}

/// Integer weights summing to exactly 1000 in the proportions of `weights` (largest
/// remainders get the units rounding left over).
fn scale_to_1000(weights: &[f64]) -> anyhow::Result<Vec<u32>> {
    let total: f64 = weights.iter().sum();
    anyhow::ensure!(
        total > 0.0 && weights.iter().all(|w| w.is_finite() && *w >= 0.0),
        "weights must be non-negative and not all zero: {weights:?}"
    );
    let exact: Vec<f64> = weights.iter().map(|w| w * 1000.0 / total).collect();
    let mut scaled: Vec<u32> = exact.iter().map(|w| w.floor() as u32).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let missing = 1000 - scaled.iter().sum::<u32>();
    for &i in order.iter().take(missing as usize) {
        scaled[i] += 1;
    }
    Ok(scaled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::ClientEvent;

    #[test]
    fn weights_scale_to_exactly_1000_in_proportion() {
        assert_eq!(scale_to_1000(&[50.0, 50.0]).unwrap(), [500, 500]);
        assert_eq!(scale_to_1000(&[34.0, 33.0, 33.0]).unwrap(), [340, 330, 330]);
        assert_eq!(scale_to_1000(&[1.0, 1.0, 1.0]).unwrap(), [334, 333, 333]);
        assert_eq!(scale_to_1000(&[0.6, 0.4]).unwrap(), [600, 400]);
        // The unit left over goes to the largest remainder (666.67), not the first.
        assert_eq!(scale_to_1000(&[1.0, 2.0]).unwrap(), [333, 667]);
        assert_eq!(
            scale_to_1000(&[2.0, 2.0, 2.0, 1.0]).unwrap(),
            [286, 286, 285, 143]
        );
        assert!(scale_to_1000(&[0.0, 0.0]).is_err());
        assert!(scale_to_1000(&[f64::NAN, 1.0]).is_err());
    }

    #[test]
    fn an_answer_becomes_one_feature_per_experiment() {
        let answer = json!({ "experiments": [{
            "id": "exp_a",
            "phase": 2,
            "variants": [
                { "id": "a", "weight": 60, "control": true, "parts": { "h": "Hi" } },
                { "id": "b", "weight": 40, "control": false, "parts": { "h": "Hello" } },
            ],
        }]});
        let features = unleash_features(&answer).unwrap();
        assert_eq!(features["version"], 2);
        let feature = &features["features"][0];
        assert_eq!(feature["name"], "exp_a");
        assert_eq!(feature["enabled"], true);
        let variants = &feature["strategies"][0]["variants"];
        assert_eq!(variants[0]["name"], "a");
        assert_eq!(variants[0]["weight"], 600);
        assert_eq!(variants[1]["weight"], 400);
        let payload: Value =
            serde_json::from_str(variants[1]["payload"]["value"].as_str().unwrap()).unwrap();
        assert_eq!(
            payload,
            json!({ "control": false, "parts": { "h": "Hello" } })
        );
        assert!(unleash_features(&json!({ "experiments": [{ "id": "x" }] })).is_err());
    }

    #[test]
    fn a_posthog_batch_carries_every_field_of_the_events() {
        let event = ClientEvent {
            event_id: uuid::Uuid::from_u128(7),
            event_name: "click",
            experiment_id: "exp_a".into(),
            session_id: "s1".into(),
            variant_id: Some("b".into()),
            click_target: Some("cta"),
            pathname: "/",
            referrer: "",
            ..ClientEvent::default()
        };
        let batch = Batch {
            key: "pk_live_x".into(),
            user_agent: "UA",
            beacon: false,
            events: vec![event],
        };
        let body: Value = serde_json::from_slice(&posthog_body(&batch).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({ "api_key": "pk_live_x", "batch": [{
                "event": "click",
                "uuid": "00000000-0000-0000-0000-000000000007",
                "distinct_id": "s1",
                "properties": {
                    "experimentId": "exp_a", "sessionId": "s1", "variantId": "b",
                    "clickTarget": "cta", "pathname": "/", "referrer": "",
                },
            }]})
        );
    }
}

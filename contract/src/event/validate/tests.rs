use serde_json::json;

use super::*;
use crate::event::envelope::is_bot;
use crate::event::limits::{MAX_EVENT_AGE_MS, MAX_USER_AGENT_BYTES};

#[test]
fn the_kept_user_agent_is_cut_at_a_character_boundary_or_dropped() {
    let envelope = || Envelope::new(0, "pk".into(), "Mozilla/5.0 (é)".into(), None);
    assert_eq!(
        envelope().keeping_user_agent(1024).user_agent,
        "Mozilla/5.0 (é)"
    );
    // `é` is two bytes: a cut inside it keeps the characters before.
    assert_eq!(
        envelope().keeping_user_agent(14).user_agent,
        "Mozilla/5.0 ("
    );
    assert_eq!(envelope().keeping_user_agent(0).user_agent, "");
}

fn envelope() -> Envelope {
    Envelope::new(1_700_000_000_123, "pk_test".into(), "UA".into(), None)
}

/// Both readings of an event, which must agree, as the result or `field: message`.
fn check(v: Value) -> Result<EventMessage, String> {
    agree(&v.to_string(), EventMessage::from_client(&v, &envelope()))
}

fn agree(json: &str, from_value: Result<EventMessage, Rejection>) -> Result<EventMessage, String> {
    let envelope = envelope();
    let from_text = EventMessage::from_client_json(json, &envelope).map(|m| m.map(Cow::into_owned));
    match (&from_value, from_text) {
        (Ok(a), Ok(b)) => assert_eq!(
            *a,
            EventMessage {
                event_id: a.event_id,
                ..b
            },
            "{json}"
        ),
        (Err(a), Err(b)) => assert_eq!(*a, b, "{json}"),
        (a, b) => panic!("{json}: the Value reading gave {a:?}, the typed one {b:?}"),
    }
    from_value.map_err(|r| format!("{}: {r}", r.field))
}

#[test]
fn control_characters_are_found_in_the_bytes_as_char_is_control_finds_them() {
    for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
        for s in [c.to_string(), format!("ab{c}"), format!("{c}\u{a0}é")] {
            assert_eq!(
                super::has_control(&s),
                s.chars().any(char::is_control),
                "{c:?}"
            );
        }
    }
}

#[test]
fn text_the_typed_reading_cannot_take_gets_the_value_answer() {
    let value = |json: &str| {
        serde_json::from_str::<Value>(json)
            .map_err(|e| Rejection::unreadable(json, &e))
            .and_then(|v| EventMessage::from_client(&v, &envelope()))
    };
    for json in [
        // A repeated field: the last one counts, as in a JSON object.
        r#"{"eventName":"a","eventName":"click","experimentId":"exp_1","sessionId":"s"}"#,
        // An array would fill the typed fields by position.
        r#"["click","exp_1","s"]"#,
        r#"  {"eventName":"cl\u00efck \"x\"","experimentId":"exp_1","sessionId":"s","extra":[1,{"a":null}]}"#,
        r#"{"eventName":"click","experimentId":"exp_1","sessionId":"s","loadTime":12}"#,
        r#"{"eventName":"click","experimentId":"exp_1","sessionId":"s","loadTime":1e400}"#,
        "nonsense",
    ] {
        let _ = agree(json, value(json));
    }
    let envelope = envelope();
    let typed = EventMessage::from_client_json(
        r#"{"eventName":"a","eventName":"click","experimentId":"exp_1","sessionId":"s"}"#,
        &envelope,
    );
    assert_eq!(typed.expect("valid").event_name, "click");
}

/// What a batch's reading lets through (it checks the JSON's shape only) but no value
/// can hold is named as such, not called "no object".
#[test]
fn an_event_json_cannot_hold_is_said_to_be_invalid_json() {
    let envelope = envelope();
    let refused = |json: &str| {
        EventMessage::from_client_json(json, &envelope)
            .map(|_| ())
            .expect_err(json)
    };
    for json in [
        r#"{"eventName":"\ud800","experimentId":"exp_1","sessionId":"s"}"#,
        r#"{"eventName":"a\udc00b","experimentId":"exp_1","sessionId":"s"}"#,
        r#"{"eventName":"a","experimentId":"exp_1","sessionId":"s","visitorId":"\ud800\u0041"}"#,
    ] {
        assert_eq!(
            refused(json),
            Rejection::new(
                "event",
                "an event is not valid JSON: a string holds a lone UTF-16 surrogate escape \
                 (\\ud800 to \\udfff without its pair)"
            ),
            "{json}"
        );
    }
    for json in [
        r#"{"eventName":"a","experimentId":"exp_1","sessionId":"s","loadTime":1e400}"#,
        r#"{"eventName":"a","experimentId":"exp_1","sessionId":"s","scrollDepth":-1e400}"#,
    ] {
        assert_eq!(
            refused(json).message,
            "an event is not valid JSON: a number is out of range (beyond a 64-bit float)",
            "{json}"
        );
    }
    for json in ["[1]", "7", "\"text\"", "  [[[[]]]]"] {
        assert_eq!(
            refused(json).message,
            "an event must be a JSON object",
            "{json}"
        );
    }
    // Unknown fields are not read, so what they hold does not matter.
    let ignored =
        r#"{"eventName":"a","experimentId":"exp_1","sessionId":"s","x":["\ud800",1e400]}"#;
    assert!(EventMessage::from_client_json(ignored, &envelope).is_ok());
    // A surrogate pair is one character: read as such.
    let pair = r#"{"eventName":"\ud83d\ude00","experimentId":"exp_1","sessionId":"s"}"#;
    let message = EventMessage::from_client_json(pair, &envelope).expect("valid");
    assert_eq!(message.event_name, "\u{1F600}");
}

#[test]
fn texts_are_borrowed_from_the_json_unless_it_escaped_them() {
    let envelope = envelope();
    let json = r#"{"eventName":"click","experimentId":"exp_1","sessionId":"s\u00e9","pathname":"/a\"b","referrer":"r"}"#;
    let m = EventMessage::from_client_json(json, &envelope).expect("valid");
    let borrowed = |text: &Cow<'_, str>| matches!(text, Cow::Borrowed(_));
    assert!(borrowed(&m.event_name) && borrowed(&m.experiment_id));
    assert!(borrowed(m.referrer.as_ref().expect("referrer")));
    assert!(borrowed(&m.public_key) && borrowed(&m.user_agent));
    assert_eq!(
        (m.session_id.as_ref(), m.pathname.as_deref()),
        ("sé", Some("/a\"b"))
    );
    assert!(!borrowed(&m.session_id) && !borrowed(m.pathname.as_ref().expect("pathname")));
}

fn minimal() -> Value {
    json!({ "eventName": "impression", "experimentId": "exp_1", "sessionId": "s1" })
}

fn with(field: &str, value: Value) -> Value {
    let mut v = minimal();
    v[field] = value;
    v
}

#[test]
fn the_visitor_is_the_key_and_the_unit_and_defaults_to_the_session() {
    let m = check(minimal()).expect("valid");
    assert_eq!((m.visitor_id.as_deref(), m.visitor()), (None, "s1"));
    assert_eq!(m.kafka_key(), "s1");
    let m = check(with("visitorId", json!("v-1"))).expect("valid");
    assert_eq!((m.visitor(), m.kafka_key()), ("v-1", "v-1"));
    // The rules of an id, as sessionId's.
    assert_eq!(
        check(with("visitorId", json!("v\u{7}"))).map(|_| ()),
        Err("visitorId: field visitorId must not contain control characters".into())
    );
    assert!(check(with("visitorId", json!("v".repeat(MAX_ID_CHARS + 1)))).is_err());
    assert!(check(with("visitorId", json!(7))).is_err());
}

#[test]
fn a_phase_is_a_whole_number_from_one() {
    for ok in [1, 2, MAX_PHASE] {
        assert_eq!(
            check(with("phase", json!(ok))).expect("valid").phase,
            Some(ok)
        );
    }
    assert_eq!(
        check(with("phase", Value::Null)).expect("valid").phase,
        None
    );
    let refused = format!("phase: field phase must be a whole number from 1 to {MAX_PHASE}");
    for bad in [
        json!(0),
        json!(-1),
        json!(1.5),
        json!(MAX_PHASE + 1),
        json!(1e20),
    ] {
        assert_eq!(
            check(with("phase", bad.clone())).map(|_| ()),
            Err(refused.clone()),
            "{bad}"
        );
    }
    assert_eq!(
        check(with("phase", json!("2"))).map(|_| ()),
        Err("phase: field phase must be a number".into())
    );
}

#[test]
fn crawlers_and_automation_are_bots_by_their_user_agent() {
    for bot in [
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/156.0.0.0 Safari/537.36",
        "curl/8.5.0",
        "python-requests/2.32.3",
    ] {
        assert!(is_bot(bot), "{bot}");
        assert!(
            Envelope::new(0, "pk".into(), bot.into(), None).is_bot,
            "{bot}"
        );
    }
    for person in [
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
        "",
    ] {
        assert!(!is_bot(person), "{person}");
    }
    let bot = Envelope::new(0, "pk".into(), "Googlebot/2.1".into(), None);
    let m = EventMessage::from_client(&minimal(), &bot).expect("valid");
    assert!(m.is_bot);
    let json = serde_json::to_value(&m).expect("ser");
    assert_eq!(json["is_bot"], json!(true));
    let person = EventMessage::from_client(&minimal(), &envelope()).expect("valid");
    let json = serde_json::to_value(&person).expect("ser");
    assert!(json.get("is_bot").is_none(), "left out when false: {json}");
}

#[test]
fn full_event_maps_every_field() {
    let id = Uuid::new_v4();
    let m = check(json!({
        "eventId": id.to_string(), "eventName": "click", "experimentId": "exp_1",
        "sessionId": "s1", "variantId": "var_b", "conversion": true, "loadTime": 12.5,
        "scrollDepth": 100, "timeOnPage": 0, "clickTarget": "#buy", "pathname": "/p",
        "referrer": "", "utm_source": "a", "utm_medium": "b", "utm_campaign": "c",
        "utm_term": "d", "utm_content": "e", "test": false, "someday": [1, 2]
    }))
    .expect("valid");
    assert_eq!(m.event_id, id);
    assert_eq!(
        (m.received_at, m.public_key.as_str(), m.user_agent.as_str()),
        (1_700_000_000_123, "pk_test", "UA")
    );
    assert_eq!(m.variant_id.as_deref(), Some("var_b"));
    assert_eq!((m.conversion, m.test), (Some(true), Some(false)));
    assert_eq!(
        (m.load_time, m.scroll_depth, m.time_on_page),
        (Some(12.5), Some(100.0), Some(0.0))
    );
    assert_eq!(m.referrer.as_deref(), Some(""));
    assert_eq!(m.utm_content.as_deref(), Some("e"));
    let back: EventMessage =
        serde_json::from_slice(&serde_json::to_vec(&m).expect("ser")).expect("de");
    assert_eq!(back, m);
}

#[test]
fn event_time_is_the_clients_timestamp_moved_by_its_clock_offset_within_bounds() {
    let received = 1_700_000_000_123;
    // The client's clock is 10 s behind; it stamped the event 3 s before sending.
    let batch = Envelope {
        sent_at: Some((received - 10_000) as f64),
        ..envelope()
    };
    let at = |timestamp: Value| {
        let v = with("timestamp", timestamp);
        let m = EventMessage::from_client(&v, &batch).expect("valid");
        let json = v.to_string();
        let typed = EventMessage::from_client_json(&json, &batch).expect("valid");
        assert_eq!(m.event_time, typed.event_time, "{v}");
        m.event_time
    };
    assert_eq!(at(json!(received - 13_000)), Some(received - 3_000));
    assert_eq!(
        at(json!(received as f64 - 13_000.4)),
        Some(received - 3_000)
    );
    // Never after its receipt, never more than a day before it.
    assert_eq!(at(json!(received)), Some(received));
    assert_eq!(at(json!(0)), Some(received - MAX_EVENT_AGE_MS));
    assert_eq!(at(json!(-1e300)), Some(received - MAX_EVENT_AGE_MS));
    assert_eq!(at(json!(1e300)), Some(received));
    // Without either half there is no offset to apply: the event happened on receipt.
    assert_eq!(at(Value::Null), None);
    let m = check(with("timestamp", json!(received - 5))).expect("valid");
    assert_eq!(m.event_time, None);
    assert_eq!(
        check(with("timestamp", json!("yesterday"))).map(|_| ()),
        Err("timestamp: field timestamp must be a number".into())
    );
    // The message carries it, and an older message without it still reads.
    let m = EventMessage::from_client(&with("timestamp", json!(received - 13_000)), &batch)
        .expect("valid");
    let text = serde_json::to_string(&m).expect("ser");
    let field = format!(r#","event_time":{}"#, received - 3_000);
    assert!(text.contains(&field), "{text}");
    let old: EventMessage = serde_json::from_str(&text.replace(&field, "")).expect("de");
    assert_eq!(
        (old.event_time, m.event_time),
        (None, Some(received - 3_000))
    );
}

#[test]
fn server_assigns_uuid_v7_when_absent() {
    let m = check(minimal()).expect("valid");
    assert_eq!(m.event_id.get_version_num(), 7);
    assert_eq!(m.variant_id, None);
    assert_eq!(m.kafka_key(), "s1");
}

#[test]
fn rejections_name_the_field() {
    let long = |n: usize| Value::String("é".repeat(n));
    let cases = [
        (json!([]), "must be a JSON object"),
        (
            json!({ "experimentId": "exp_1", "sessionId": "s" }),
            "eventName is required",
        ),
        (with("eventName", json!("")), "eventName must not be empty"),
        (with("eventName", json!(5)), "eventName must be a string"),
        (
            with("experimentId", json!("1")),
            "experimentId must be exp_",
        ),
        (
            with("experimentId", json!("exp_")),
            "experimentId must be exp_",
        ),
        (with("sessionId", json!(null)), "sessionId is required"),
        (with("visitorId", json!("")), "visitorId must not be empty"),
        (
            with("sessionId", json!("a\u{0}b")),
            "sessionId must not contain control",
        ),
        (with("variantId", json!("v1")), "variantId must be var_"),
        (
            with("conversion", json!("true")),
            "conversion must be a boolean",
        ),
        (with("loadTime", json!("5")), "loadTime must be a number"),
        (
            with("loadTime", json!(-1)),
            "loadTime must be a number >= 0",
        ),
        (
            with("timeOnPage", json!(-0.5)),
            "timeOnPage must be a number >= 0",
        ),
        (
            with("scrollDepth", json!(100.5)),
            "scrollDepth must be between 0 and 100",
        ),
        (
            with("scrollDepth", json!(-1)),
            "scrollDepth must be between 0 and 100",
        ),
        (with("test", json!(1)), "test must be a boolean"),
        (with("eventId", json!("nope")), "eventId must be a UUID"),
        (
            with("eventId", json!(Uuid::nil().to_string())),
            "eventId must be a UUID",
        ),
        (with("sessionId", long(257)), "sessionId is longer than 256"),
        (with("pathname", long(2049)), "pathname is longer than 2048"),
        (with("utm_term", long(513)), "utm_term is longer than 512"),
        (with("referrer", json!(false)), "referrer must be a string"),
    ];
    for (input, want) in cases {
        let err = check(input.clone()).expect_err(&format!("{input} was accepted"));
        assert!(err.contains(want), "{input}: got {err:?}, want {want:?}");
        let field = err.split(':').next().unwrap_or_default();
        assert!(
            field == "event" || want.contains(field),
            "{err:?} blames {field}"
        );
    }
}

#[test]
fn an_event_with_several_faults_is_refused_for_the_first_the_rules_check() {
    let faults = |pairs: &[(&str, Value)]| {
        let mut v = minimal();
        for (field, value) in pairs {
            v[*field] = value.clone();
        }
        check(v).expect_err("refused")
    };
    let cases = [
        (
            faults(&[("eventName", json!(5)), ("experimentId", json!("x"))]),
            "experimentId: field experimentId must be exp_",
        ),
        (
            faults(&[("sessionId", json!("")), ("variantId", json!("x"))]),
            "variantId: field variantId must be var_",
        ),
        (
            faults(&[("loadTime", json!(-1)), ("scrollDepth", json!(101))]),
            "scrollDepth: field scrollDepth must be between",
        ),
        (
            faults(&[("loadTime", json!(-1)), ("timeOnPage", json!("x"))]),
            "timeOnPage: field timeOnPage must be a number",
        ),
        (
            faults(&[("conversion", json!(1)), ("pathname", json!(1))]),
            "conversion: field conversion must be a boolean",
        ),
    ];
    for (got, want) in cases {
        assert!(got.starts_with(want), "got {got:?}, want {want:?}");
    }
}

#[test]
fn limits_count_characters_and_free_text_keeps_control_characters() {
    let m = check(with("sessionId", Value::String("é".repeat(256)))).expect("256 chars");
    assert_eq!(m.session_id.chars().count(), 256);
    let m = check(with("clickTarget", json!("a\tb\u{1}"))).expect("free text");
    assert_eq!(m.click_target.as_deref(), Some("a\tb\u{1}"));
    assert!(check(with("eventName", json!("my custom event"))).is_ok());
}

#[test]
fn user_agent_is_cut_at_a_char_boundary() {
    let ua = Envelope::clamp_user_agent("é".repeat(600));
    assert!(ua.len() <= MAX_USER_AGENT_BYTES && ua.len() >= MAX_USER_AGENT_BYTES - 1);
}

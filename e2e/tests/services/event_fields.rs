//! The one list of the event's client fields, `contract::event::FIELDS`, against
//! everything else that names them: the Kafka message, the consumer's row and columns, the
//! SDK's `Event` interface (`sdk/src/index.ts`) and the OpenAPI schema's `Event`
//! (`docs/openapi.yaml`). No server: the live table is checked by `schema`'s
//! `the_events_table_has_the_rows_columns_and_no_other`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clickhouse::Row;
use contract::event::{CLIENT_ONLY, Envelope, EventMessage, FIELDS, Field, INGEST_FIELDS, Kind};
use schema::EventRow;
use serde_json::{Value, json};

fn repo_file(path: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The client names of the list and of what the ingest reads besides, sorted.
fn client_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = FIELDS.iter().map(|f| f.client).collect();
    names.extend(CLIENT_ONLY);
    names.sort_unstable();
    names
}

fn field(client: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.client == client)
}

/// A client's event with every field of the list set, and the message it becomes.
fn full_message() -> EventMessage {
    let mut event = json!({ "timestamp": 1.0 });
    for field in FIELDS {
        event[field.client] = match (field.client, field.kind) {
            ("experimentId", _) => json!("exp_1"),
            ("variantId", _) => json!("var_1"),
            (_, Kind::Id(_) | Kind::Text(_)) => json!("x"),
            (_, Kind::Number | Kind::Whole) => json!(1),
            (_, Kind::Flag) => json!(true),
        };
    }
    let envelope = Envelope::new(1_000, "pk".into(), "curl/8".into(), Some(1.0));
    EventMessage::from_client(&event, &envelope).expect("an event of every field")
}

#[test]
fn the_message_has_the_lists_fields_after_the_ingests() {
    let message = serde_json::to_value(full_message()).expect("ser");
    let Value::Object(fields) = message else {
        panic!("{message}")
    };
    let mut names: Vec<&str> = fields.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut want: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
    want.extend(INGEST_FIELDS);
    want.sort_unstable();
    assert_eq!(names, want);
}

#[test]
fn the_row_and_its_columns_are_the_lists_fields_after_the_ingests() {
    let client = &<EventRow as Row>::COLUMN_NAMES[EventRow::<String>::INGEST_COLUMNS..];
    let want: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
    assert_eq!(client, want);
    let caps = schema::ServerCaps::parse("25.3.1.1").expect("a version");
    let columns = schema::event_columns(caps);
    let client: Vec<(&str, &str)> = columns[EventRow::<String>::INGEST_COLUMNS..]
        .iter()
        .map(|(name, ty)| (*name, ty.as_str()))
        .collect();
    let want: Vec<(&str, &str)> = FIELDS.iter().map(|f| (f.name, f.column)).collect();
    assert_eq!(client, want);
}

/// The fields of `interface Event { … }` in the SDK's source: name, type, optional.
fn sdk_event_fields() -> BTreeMap<String, (String, bool)> {
    let source = repo_file("sdk/src/index.ts");
    let start = source
        .find("\ninterface Event {")
        .expect("sdk/src/index.ts declares `interface Event {`");
    let body = &source[start..];
    let body = &body[body.find('{').expect("{") + 1..body.find("\n}").expect("}")];
    let mut fields = BTreeMap::new();
    for line in body.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('[') || line.starts_with("//") {
            continue;
        }
        let (name, ty) = line
            .trim_end_matches(';')
            .split_once(':')
            .unwrap_or_else(|| panic!("not a field: {line}"));
        let (name, optional) = match name.strip_suffix('?') {
            Some(name) => (name, true),
            None => (name, false),
        };
        fields.insert(name.trim().to_owned(), (ty.trim().to_owned(), optional));
    }
    fields
}

/// The TypeScript type of a client field of this kind.
fn ts_type(kind: Option<Kind>, client: &str) -> &'static str {
    match (kind, client) {
        (Some(Kind::Id(_) | Kind::Text(_)), _) | (None, "eventId") => "string",
        (Some(Kind::Number | Kind::Whole), _) | (None, "timestamp") => "number",
        (Some(Kind::Flag), _) => "boolean",
        (None, other) => panic!("no type for {other}"),
    }
}

#[test]
fn the_sdks_event_interface_has_the_lists_fields_with_their_types() {
    let sdk = sdk_event_fields();
    let names: Vec<&str> = sdk.keys().map(String::as_str).collect();
    let mut want = client_names();
    want.sort_unstable();
    assert_eq!(names, want, "sdk/src/index.ts's Event against FIELDS");
    for (name, (ty, optional)) in &sdk {
        let field = field(name);
        assert_eq!(
            (ty.as_str(), *optional),
            (
                ts_type(field.map(|f| f.kind), name),
                !field.is_some_and(|f| f.required)
            ),
            "{name}"
        );
    }
}

#[test]
fn the_openapi_event_has_the_lists_fields_with_their_types_and_limits() {
    let spec: serde_yaml::Value =
        serde_yaml::from_str(&repo_file("docs/openapi.yaml")).expect("docs/openapi.yaml is YAML");
    let event = &spec["components"]["schemas"]["Event"];
    let properties = event["properties"]
        .as_mapping()
        .expect("components.schemas.Event.properties");
    let mut names: Vec<&str> = properties.keys().filter_map(|k| k.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        client_names(),
        "docs/openapi.yaml's Event against FIELDS"
    );
    let mut required: Vec<&str> = event["required"]
        .as_sequence()
        .expect("required")
        .iter()
        .filter_map(|r| r.as_str())
        .collect();
    required.sort_unstable();
    let mut want: Vec<&str> = FIELDS
        .iter()
        .filter(|f| f.required)
        .map(|f| f.client)
        .collect();
    want.sort_unstable();
    assert_eq!(required, want);
    for field in FIELDS {
        let schema = &event["properties"][field.client];
        let types: Vec<&str> = match &schema["type"] {
            serde_yaml::Value::String(ty) => vec![ty.as_str()],
            serde_yaml::Value::Sequence(types) => types.iter().filter_map(|t| t.as_str()).collect(),
            other => panic!("{}: type {other:?}", field.client),
        };
        let ty = match field.kind {
            Kind::Id(_) | Kind::Text(_) => "string",
            Kind::Number => "number",
            Kind::Whole => "integer",
            Kind::Flag => "boolean",
        };
        let want = if field.required {
            vec![ty]
        } else {
            vec![ty, "null"]
        };
        assert_eq!(types, want, "{}", field.client);
        let max = match field.kind {
            Kind::Id(max) | Kind::Text(max) => Some(max as u64),
            _ => None,
        };
        assert_eq!(schema["maxLength"].as_u64(), max, "{}", field.client);
    }
}

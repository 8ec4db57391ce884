CREATE TABLE IF NOT EXISTS {table} (
    event_id      UUID,
    received_at   DateTime('UTC'),
    public_key    LowCardinality(String),
    event_name    LowCardinality(String),
    experiment_id LowCardinality(String),
    variant_id    LowCardinality(String),
    session_id    String,
    conversion    Nullable(UInt8),
    load_time     Nullable(Float64),
    scroll_depth  Nullable(Float64),
    time_on_page  Nullable(Float64),
    click_target  String,
    pathname      String,
    referrer      String,
    utm_source    LowCardinality(String),
    utm_medium    LowCardinality(String),
    utm_campaign  LowCardinality(String),
    utm_term      String,
    utm_content   String,
    test          UInt8,
    user_agent    String
)
ENGINE = {engine}
PARTITION BY toYYYYMM(received_at)
ORDER BY (public_key, experiment_id, toDate(received_at), event_id)

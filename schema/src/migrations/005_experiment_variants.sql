CREATE TABLE IF NOT EXISTS {table} (
    experiment_id String,
    variant_id    String,
    version       String,
    weight        Float64,
    is_control    UInt8,
    status        LowCardinality(String),
    start_at      Nullable(DateTime('UTC')),
    end_at        Nullable(DateTime('UTC')),
    parts         String,
    loaded_at     {millis}
)
ENGINE = {engine}
ORDER BY (experiment_id, version, variant_id)

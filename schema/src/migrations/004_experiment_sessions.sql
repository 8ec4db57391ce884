CREATE TABLE IF NOT EXISTS {table} (
    public_key       LowCardinality(String),
    experiment_id    LowCardinality(String),
    session_id       String,
    variants         AggregateFunction(uniqExactIf, String, UInt8),
    first_variant    AggregateFunction(argMinIf, String, {millis}, UInt8),
    first_exposure   AggregateFunction(minIf, {millis}, UInt8),
    last_conversion  AggregateFunction(maxIf, {millis}, UInt8),
    tested           AggregateFunction(max, UInt8),
    max_time_on_page AggregateFunction(maxIf, Float64, UInt8),
    has_time_on_page AggregateFunction(max, UInt8)
)
ENGINE = {engine}
ORDER BY (public_key, experiment_id, session_id)

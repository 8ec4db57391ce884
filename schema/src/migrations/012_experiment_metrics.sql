CREATE TABLE IF NOT EXISTS {table} (
    experiment_id       String,
    version             String,
    phase               UInt32,
    metric_id           String,
    -- goal | secondary | guardrail
    role                LowCardinality(String),
    -- The metric's place in the experiment's list (the default goal first, 0).
    position            UInt32,
    -- proportion | mean | ratio
    kind                LowCardinality(String),
    -- The numerator (proportion and mean: the value): which events, which field, how
    -- they are aggregated per visitor. '' where the definition does not restrict.
    num_event           String,
    num_click_target    String,
    num_conversion      UInt8,
    num_field           String,
    num_aggregate       LowCardinality(String),
    -- The denominator of a ratio; den_aggregate '' for the other kinds (one per visitor).
    den_event           String,
    den_click_target    String,
    den_conversion      UInt8,
    den_field           String,
    den_aggregate       LowCardinality(String),
    -- 0: none.
    cap_value           Float64,
    cap_percentile      Float64,
    higher_is_better    UInt8,
    -- The CUPED lookback before each visitor's first exposure; 0: no CUPED.
    cuped_lookback_days Float64,
    -- The metric's definition as loaded, JSON.
    definition          String,
    loaded_at           {millis},
    -- The keys that list the experiment, sorted (access: an analyst sees their keys').
    public_keys         Array(String)
)
ENGINE = {engine}
ORDER BY (experiment_id, version, metric_id)

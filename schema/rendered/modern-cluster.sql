-- The schema of database analytics as `consumer --print-schema --profile modern-cluster` prints it:
-- every statement that migrating a fresh database sends, in order. Generated: do not edit.

-- 1. runs once
CREATE DATABASE IF NOT EXISTS analytics ON CLUSTER analytics;

-- 2. runs each server
CREATE TABLE IF NOT EXISTS analytics.schema_migrations (version UInt32, description String, applied_at DateTime)
ENGINE = ReplicatedMergeTree('/clickhouse/tables/all/analytics/schema_migrations', '{replica}') ORDER BY version;

-- 3. runs each server
CREATE TABLE IF NOT EXISTS analytics.events_local (
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
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/analytics/events', '{replica}')
PARTITION BY toYYYYMM(received_at)
ORDER BY (public_key, experiment_id, toDate(received_at), event_id);

-- 4. runs once
CREATE TABLE IF NOT EXISTS analytics.events ON CLUSTER analytics AS analytics.events_local
ENGINE = Distributed(analytics, analytics, events_local, sipHash64(session_id));

-- 5. runs each shard
ALTER TABLE analytics.events_local ADD COLUMN received_at_ms DateTime64(3, 'UTC') DEFAULT toDateTime64(received_at, 3, 'UTC') AFTER received_at;

-- 6. runs each shard
ALTER TABLE analytics.events_local ADD COLUMN event_time DateTime64(3, 'UTC') DEFAULT received_at_ms AFTER received_at_ms;

-- 7. runs each server
ALTER TABLE analytics.events ADD COLUMN received_at_ms DateTime64(3, 'UTC') DEFAULT toDateTime64(received_at, 3, 'UTC') AFTER received_at;

-- 8. runs each server
ALTER TABLE analytics.events ADD COLUMN event_time DateTime64(3, 'UTC') DEFAULT received_at_ms AFTER received_at_ms;

-- 9. runs each server
CREATE TABLE IF NOT EXISTS analytics.experiment_sessions_local (
    public_key       LowCardinality(String),
    experiment_id    LowCardinality(String),
    session_id       String,
    variants         AggregateFunction(uniqExactIf, String, UInt8),
    first_variant    AggregateFunction(argMinIf, String, DateTime64(3, 'UTC'), UInt8),
    first_exposure   AggregateFunction(minIf, DateTime64(3, 'UTC'), UInt8),
    last_conversion  AggregateFunction(maxIf, DateTime64(3, 'UTC'), UInt8),
    tested           AggregateFunction(max, UInt8),
    max_time_on_page AggregateFunction(maxIf, Float64, UInt8),
    has_time_on_page AggregateFunction(max, UInt8)
)
ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/analytics/experiment_sessions', '{replica}')
ORDER BY (public_key, experiment_id, session_id);

-- 10. runs once
CREATE TABLE IF NOT EXISTS analytics.experiment_sessions ON CLUSTER analytics AS analytics.experiment_sessions_local
ENGINE = Distributed(analytics, analytics, experiment_sessions_local, sipHash64(session_id));

-- 11. runs once
CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.experiment_sessions_mv ON CLUSTER analytics TO analytics.experiment_sessions_local AS SELECT
    public_key,
    experiment_id,
    session_id,
    uniqExactIfState(toString(variant_id), event_name = 'impression' AND variant_id != '')
        AS variants,
    argMinIfState(toString(variant_id), event_time,
        event_name = 'impression' AND variant_id != '') AS first_variant,
    minIfState(event_time, event_name = 'impression' AND variant_id != '') AS first_exposure,
    maxIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS last_conversion,
    maxState(test) AS tested,
    maxIfState(ifNull(time_on_page, 0), isNotNull(time_on_page)) AS max_time_on_page,
    maxState(toUInt8(isNotNull(time_on_page))) AS has_time_on_page
FROM analytics.events_local
GROUP BY public_key, experiment_id, session_id;

-- 12. runs each shard
INSERT INTO analytics.experiment_sessions_local SELECT
    public_key,
    experiment_id,
    session_id,
    uniqExactIfState(toString(variant_id), event_name = 'impression' AND variant_id != '')
        AS variants,
    argMinIfState(toString(variant_id), event_time,
        event_name = 'impression' AND variant_id != '') AS first_variant,
    minIfState(event_time, event_name = 'impression' AND variant_id != '') AS first_exposure,
    maxIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS last_conversion,
    maxState(test) AS tested,
    maxIfState(ifNull(time_on_page, 0), isNotNull(time_on_page)) AS max_time_on_page,
    maxState(toUInt8(isNotNull(time_on_page))) AS has_time_on_page
FROM analytics.events_local
GROUP BY public_key, experiment_id, session_id;

-- 13. runs each server
CREATE TABLE IF NOT EXISTS analytics.experiment_variants (
    experiment_id String,
    variant_id    String,
    version       String,
    weight        Float64,
    is_control    UInt8,
    status        LowCardinality(String),
    start_at      Nullable(DateTime('UTC')),
    end_at        Nullable(DateTime('UTC')),
    parts         String,
    loaded_at     DateTime64(3, 'UTC')
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all/analytics/experiment_variants', '{replica}')
ORDER BY (experiment_id, version, variant_id);

-- 14. runs each shard
ALTER TABLE analytics.events_local ADD COLUMN visitor_id String DEFAULT session_id;

-- 15. runs each shard
ALTER TABLE analytics.events_local ADD COLUMN phase UInt32 DEFAULT 1;

-- 16. runs each shard
ALTER TABLE analytics.events_local ADD COLUMN is_bot UInt8 DEFAULT 0;

-- 17. runs each server
DROP TABLE IF EXISTS analytics.events;

-- 18. runs each server
CREATE TABLE IF NOT EXISTS analytics.events AS analytics.events_local ENGINE = Distributed(analytics, analytics, events_local, sipHash64(visitor_id));

-- 19. runs once
ALTER TABLE analytics.experiment_variants ADD COLUMN phase UInt32 DEFAULT 1;

-- 20. runs each server
CREATE TABLE IF NOT EXISTS analytics.results_settings (
    name   String,
    value  Float64,
    set_at DateTime DEFAULT now()
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all/analytics/results_settings', '{replica}')
ORDER BY name;

-- 21. runs each server
CREATE TABLE IF NOT EXISTS analytics.experiment_visitors_local (
    public_key       LowCardinality(String),
    experiment_id    LowCardinality(String),
    phase            UInt32,
    visitor_id       String,
    variants         AggregateFunction(uniqExactIf, String, UInt8),
    first_variant    AggregateFunction(argMinIf, String, DateTime64(3, 'UTC'), UInt8),
    first_exposure   AggregateFunction(minIf, DateTime64(3, 'UTC'), UInt8),
    last_conversion  AggregateFunction(maxIf, DateTime64(3, 'UTC'), UInt8),
    excluded         AggregateFunction(max, UInt8),
    max_time_on_page AggregateFunction(maxIf, Float64, UInt8),
    has_time_on_page AggregateFunction(max, UInt8)
)
ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/analytics/experiment_visitors', '{replica}')
ORDER BY (public_key, experiment_id, phase, visitor_id);

-- 22. runs once
CREATE TABLE IF NOT EXISTS analytics.experiment_visitors ON CLUSTER analytics AS analytics.experiment_visitors_local
ENGINE = Distributed(analytics, analytics, experiment_visitors_local, sipHash64(visitor_id));

-- 23. runs once
CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.experiment_visitors_mv ON CLUSTER analytics TO analytics.experiment_visitors_local AS SELECT
    public_key,
    experiment_id,
    phase,
    visitor_id,
    uniqExactIfState(toString(variant_id), event_name = 'impression' AND variant_id != '')
        AS variants,
    argMinIfState(toString(variant_id), event_time,
        event_name = 'impression' AND variant_id != '') AS first_variant,
    minIfState(event_time, event_name = 'impression' AND variant_id != '') AS first_exposure,
    maxIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS last_conversion,
    maxState(greatest(test, is_bot)) AS excluded,
    maxIfState(ifNull(time_on_page, 0), isNotNull(time_on_page)) AS max_time_on_page,
    maxState(toUInt8(isNotNull(time_on_page))) AS has_time_on_page
FROM analytics.events_local
GROUP BY public_key, experiment_id, phase, visitor_id;

-- 24. runs each shard
INSERT INTO analytics.experiment_visitors_local SELECT
    public_key,
    experiment_id,
    phase,
    visitor_id,
    uniqExactIfState(toString(variant_id), event_name = 'impression' AND variant_id != '')
        AS variants,
    argMinIfState(toString(variant_id), event_time,
        event_name = 'impression' AND variant_id != '') AS first_variant,
    minIfState(event_time, event_name = 'impression' AND variant_id != '') AS first_exposure,
    maxIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS last_conversion,
    maxState(greatest(test, is_bot)) AS excluded,
    maxIfState(ifNull(time_on_page, 0), isNotNull(time_on_page)) AS max_time_on_page,
    maxState(toUInt8(isNotNull(time_on_page))) AS has_time_on_page
FROM analytics.events_local
GROUP BY public_key, experiment_id, phase, visitor_id;

-- 25. runs once
DROP TABLE IF EXISTS analytics.experiment_sessions_mv ON CLUSTER analytics;

-- 26. runs once
DROP TABLE IF EXISTS analytics.experiment_sessions ON CLUSTER analytics;

-- 27. runs once
DROP TABLE IF EXISTS analytics.experiment_sessions_local ON CLUSTER analytics;

-- 28. runs once
ALTER TABLE analytics.experiment_variants ADD COLUMN public_keys Array(String);

-- 29. runs each shard
ALTER TABLE analytics.experiment_visitors_local ADD COLUMN first_conversion AggregateFunction(minIf, DateTime64(3, 'UTC'), UInt8);

-- 30. runs each server
ALTER TABLE analytics.experiment_visitors ADD COLUMN first_conversion AggregateFunction(minIf, DateTime64(3, 'UTC'), UInt8);

-- 31. runs once
CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.experiment_visitors_mv2 ON CLUSTER analytics TO analytics.experiment_visitors_local AS SELECT
    public_key,
    experiment_id,
    phase,
    visitor_id,
    uniqExactIfState(toString(variant_id), event_name = 'impression' AND variant_id != '')
        AS variants,
    argMinIfState(toString(variant_id), event_time,
        event_name = 'impression' AND variant_id != '') AS first_variant,
    minIfState(event_time, event_name = 'impression' AND variant_id != '') AS first_exposure,
    maxIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS last_conversion,
    maxState(greatest(test, is_bot)) AS excluded,
    maxIfState(ifNull(time_on_page, 0), isNotNull(time_on_page)) AS max_time_on_page,
    maxState(toUInt8(isNotNull(time_on_page))) AS has_time_on_page,
    minIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS first_conversion
FROM analytics.events_local
GROUP BY public_key, experiment_id, phase, visitor_id;

-- 32. runs once
DROP TABLE IF EXISTS analytics.experiment_visitors_mv ON CLUSTER analytics;

-- 33. runs each shard
INSERT INTO analytics.experiment_visitors_local (public_key, experiment_id, phase, visitor_id, first_conversion)
SELECT public_key, experiment_id, phase, visitor_id, minIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
FROM analytics.events_local WHERE event_name = 'conversion' OR ifNull(conversion, 0) = 1 GROUP BY public_key, experiment_id, phase, visitor_id;

-- 34. runs once
ALTER TABLE analytics.experiment_variants ADD COLUMN conversion_window_hours Float64 DEFAULT 0;

-- 35. runs once
ALTER TABLE analytics.experiment_variants ADD COLUMN sequential_tuning Float64 DEFAULT 0;

-- 36. runs each server
CREATE TABLE IF NOT EXISTS analytics.results_settings_log (name String, value Float64, set_at DateTime)
ENGINE = ReplicatedMergeTree('/clickhouse/tables/all/analytics/results_settings_log', '{replica}') ORDER BY (name, set_at);

-- 37. runs once
CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.results_settings_log_mv ON CLUSTER analytics TO analytics.results_settings_log AS
 SELECT name, value, set_at FROM analytics.results_settings;

-- 38. runs once
INSERT INTO analytics.results_settings_log SELECT name, value, set_at FROM analytics.results_settings FINAL;

-- 39. runs each server
CREATE TABLE IF NOT EXISTS analytics.experiment_metrics (
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
    loaded_at           DateTime64(3, 'UTC'),
    -- The keys that list the experiment, sorted (access: an analyst sees their keys').
    public_keys         Array(String)
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all/analytics/experiment_metrics', '{replica}')
ORDER BY (experiment_id, version, metric_id);

-- 40. runs each server
CREATE TABLE IF NOT EXISTS analytics.visitor_event_counts_local (
    public_key LowCardinality(String),
    visitor_id String,
    -- Rows of `events` inserted for the visitor, a redelivered copy included: it only
    -- grows, but for an erasure, so a stored value computed from fewer rows is stale.
    events     UInt64
)
ENGINE = ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/analytics/visitor_event_counts', '{replica}')
ORDER BY (public_key, visitor_id);

-- 41. runs once
CREATE TABLE IF NOT EXISTS analytics.visitor_event_counts ON CLUSTER analytics AS analytics.visitor_event_counts_local
ENGINE = Distributed(analytics, analytics, visitor_event_counts_local, sipHash64(visitor_id));

-- 42. runs once
CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.visitor_event_counts_mv ON CLUSTER analytics TO analytics.visitor_event_counts_local AS
SELECT public_key, visitor_id, count() AS events FROM analytics.events_local GROUP BY public_key, visitor_id;

-- 43. runs each shard
INSERT INTO analytics.visitor_event_counts_local SELECT public_key, visitor_id, count() AS events FROM analytics.events_local GROUP BY public_key, visitor_id;

-- 44. runs each server
CREATE TABLE IF NOT EXISTS analytics.experiment_metric_values_local (
    public_key        LowCardinality(String),
    experiment_id     String,
    phase             UInt32,
    visitor_id        String,
    -- '' for the row that records a refresh of a visitor with no metric to store there
    -- (no exposure, or an experiment with no metric definition).
    metric_id         String,
    variant_id        String,
    first_exposure_ms Int64,
    value             Float64,
    denominator       Float64,
    pre_value         Float64,
    -- The visitor's rows in `events` that the refresh read (visitor_event_counts.events
    -- when nothing came after), and the hash of the experiment's metric definitions and
    -- phase settings it used.
    events_seen       UInt64,
    settings_hash     UInt64,
    -- Which refresh wrote the row: a visitor's rows are those of their largest.
    refresh_id        UInt64
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/analytics/experiment_metric_values', '{replica}')
ORDER BY (public_key, visitor_id, experiment_id, phase, metric_id);

-- 45. runs once
CREATE TABLE IF NOT EXISTS analytics.experiment_metric_values ON CLUSTER analytics AS analytics.experiment_metric_values_local
ENGINE = Distributed(analytics, analytics, experiment_metric_values_local, sipHash64(visitor_id));

-- 46. runs each server
CREATE TABLE IF NOT EXISTS analytics.schema_views (name String, hash String, made_at UInt64)
ENGINE = ReplicatedMergeTree('/clickhouse/tables/all/analytics/schema_views', '{replica}') ORDER BY (name, made_at);

-- 47. runs each server
CREATE TABLE IF NOT EXISTS analytics.metric_refresh_marks (consumer String, as_of DateTime, written_at DateTime)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all/analytics/metric_refresh_marks', '{replica}') ORDER BY consumer;

-- 48. runs each server
CREATE TABLE IF NOT EXISTS analytics.visitor_metric_values_local (
    public_key        LowCardinality(String),
    experiment_id     String,
    phase             UInt32,
    visitor_id        String,
    variant_id        String,
    first_exposure_ms Int64,
    -- One element per metric of the experiment that the refresh stored; none for a visitor
    -- with no exposure, or of an experiment with no metric definition.
    metrics Nested(
        metric_id   String,
        value       Float64,
        denominator Float64,
        pre_value   Float64
    ),
    -- The visitor's rows in `events` that the refresh read (visitor_event_counts.events
    -- when nothing came after), and the hash of the experiment's metric definitions and
    -- phase settings it used.
    events_seen       UInt64,
    settings_hash     UInt64,
    -- Which refresh wrote the row: a visitor's rows are those of their largest.
    refresh_id        UInt64
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/analytics/visitor_metric_values', '{replica}')
ORDER BY (public_key, visitor_id, experiment_id, phase);

-- 49. runs once
CREATE TABLE IF NOT EXISTS analytics.visitor_metric_values ON CLUSTER analytics AS analytics.visitor_metric_values_local
ENGINE = Distributed(analytics, analytics, visitor_metric_values_local, sipHash64(visitor_id));

-- 50. runs each shard
INSERT INTO analytics.visitor_metric_values_local (
    public_key, experiment_id, phase, visitor_id, variant_id, first_exposure_ms,
    metrics.metric_id, metrics.value, metrics.denominator, metrics.pre_value,
    events_seen, settings_hash, refresh_id)
SELECT
    public_key, experiment_id, phase, visitor_id, variant_id, first_exposure_ms,
    arrayMap(m -> m.1, metrics), arrayMap(m -> m.2, metrics),
    arrayMap(m -> m.3, metrics), arrayMap(m -> m.4, metrics),
    events_seen, settings_hash, latest_refresh
FROM (
    SELECT
        public_key, experiment_id, phase, visitor_id,
        argMax(variant_id, refresh_id) AS variant_id,
        argMax(first_exposure_ms, refresh_id) AS first_exposure_ms,
        max(refresh_id) AS latest_refresh,
        argMax(events_seen, refresh_id) AS events_seen,
        argMax(settings_hash, refresh_id) AS settings_hash,
        arrayFilter(m -> m.5 = latest_refresh, groupArrayIf(
            (metric_id, value, denominator, pre_value, refresh_id),
            metric_id != '')) AS metrics
    FROM analytics.experiment_metric_values_local FINAL
    GROUP BY public_key, experiment_id, phase, visitor_id
) AS visitors;

-- 51. runs once
DROP TABLE IF EXISTS analytics.experiment_metric_values ON CLUSTER analytics;

-- 52. runs once
DROP TABLE IF EXISTS analytics.experiment_metric_values_local ON CLUSTER analytics;

-- 53. runs each shard
ALTER TABLE analytics.experiment_visitors_local ADD COLUMN least_arm AggregateFunction(minIf, UInt64, UInt8),
    ADD COLUMN greatest_arm AggregateFunction(maxIf, UInt64, UInt8),
    ADD COLUMN conversions AggregateFunction(groupUniqArrayIf, DateTime64(3, 'UTC'), UInt8),
    ADD COLUMN exposure_excluded AggregateFunction(maxIf, UInt8, UInt8);

-- 54. runs each server
ALTER TABLE analytics.experiment_visitors ADD COLUMN least_arm AggregateFunction(minIf, UInt64, UInt8),
    ADD COLUMN greatest_arm AggregateFunction(maxIf, UInt64, UInt8),
    ADD COLUMN conversions AggregateFunction(groupUniqArrayIf, DateTime64(3, 'UTC'), UInt8),
    ADD COLUMN exposure_excluded AggregateFunction(maxIf, UInt8, UInt8);

-- 55. runs once
CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.experiment_visitors_mv3 ON CLUSTER analytics TO analytics.experiment_visitors_local AS SELECT
    public_key,
    experiment_id,
    phase,
    visitor_id,
    uniqExactIfState(toString(variant_id), event_name = 'impression' AND variant_id != '')
        AS variants,
    argMinIfState(toString(variant_id), event_time,
        event_name = 'impression' AND variant_id != '') AS first_variant,
    minIfState(event_time, event_name = 'impression' AND variant_id != '') AS first_exposure,
    maxIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS last_conversion,
    maxState(greatest(test, is_bot)) AS excluded,
    maxIfState(ifNull(time_on_page, 0), isNotNull(time_on_page)) AS max_time_on_page,
    maxState(toUInt8(isNotNull(time_on_page))) AS has_time_on_page,
    minIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS first_conversion,
    minIfState(bitShiftLeft(cityHash64(toString(variant_id)) % 4294967296, 32)
        + toUInt64(intDiv(toUnixTimestamp64Milli(event_time), 3600000)),
        event_name = 'impression' AND variant_id != '') AS least_arm,
    maxIfState(toUInt64(bitShiftLeft(cityHash64(toString(variant_id)) % 4294967296, 32)
        + (4294967295 - toUInt64(intDiv(toUnixTimestamp64Milli(event_time), 3600000)))),
        event_name = 'impression' AND variant_id != '') AS greatest_arm,
    groupUniqArrayIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS conversions,
    maxIfState(greatest(test, is_bot), event_name = 'impression' AND variant_id != '')
        AS exposure_excluded
FROM analytics.events_local
GROUP BY public_key, experiment_id, phase, visitor_id;

-- 56. runs once
DROP TABLE IF EXISTS analytics.experiment_visitors_mv2 ON CLUSTER analytics;

-- 57. runs each shard
INSERT INTO analytics.experiment_visitors_local (public_key, experiment_id, phase, visitor_id, least_arm, greatest_arm, conversions, exposure_excluded)
SELECT public_key, experiment_id, phase, visitor_id,
    minIfState(bitShiftLeft(cityHash64(toString(variant_id)) % 4294967296, 32)
        + toUInt64(intDiv(toUnixTimestamp64Milli(event_time), 3600000)),
        event_name = 'impression' AND variant_id != '') AS least_arm,
    maxIfState(toUInt64(bitShiftLeft(cityHash64(toString(variant_id)) % 4294967296, 32)
        + (4294967295 - toUInt64(intDiv(toUnixTimestamp64Milli(event_time), 3600000)))),
        event_name = 'impression' AND variant_id != '') AS greatest_arm,
    groupUniqArrayIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS conversions,
    maxIfState(greatest(test, is_bot), event_name = 'impression' AND variant_id != '')
        AS exposure_excluded
FROM analytics.events_local GROUP BY public_key, experiment_id, phase, visitor_id;

-- 58. runs each shard
ALTER TABLE analytics.visitor_metric_values_local ADD COLUMN metrics.pre_seen Array(Float64)
    DEFAULT arrayMap(v -> toFloat64(v != 0), metrics.pre_value);

-- 59. runs each server
ALTER TABLE analytics.visitor_metric_values ADD COLUMN metrics.pre_seen Array(Float64)
    DEFAULT arrayMap(v -> toFloat64(v != 0), metrics.pre_value);

-- 60. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_daily ON CLUSTER analytics AS
SELECT
    public_key,
    experiment_id,
    variant_id,
    toDate(received_at) AS day,
    countIf(event_name = 'impression') AS impressions,
    countIf(conversion = 1 OR event_name = 'conversion') AS conversions,
    uniqExact(session_id) AS sessions,
    count() AS events
FROM analytics.events FINAL
WHERE test = 0
GROUP BY public_key, experiment_id, variant_id, day;

-- 61. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_variants_current ON CLUSTER analytics AS
SELECT experiment_id, variant_id, version, weight, is_control, status, start_at, end_at, parts
FROM analytics.experiment_variants FINAL
WHERE (experiment_id, version) IN (
    SELECT experiment_id, argMax(version, loaded_at)
    FROM analytics.experiment_variants FINAL
    GROUP BY experiment_id
);

-- 62. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_phase_variants ON CLUSTER analytics AS
SELECT experiment_id, phase, variant_id, weight, is_control
FROM analytics.experiment_variants FINAL
WHERE (experiment_id, phase, version) IN (
    SELECT experiment_id, phase, argMax(version, loaded_at)
    FROM analytics.experiment_variants FINAL
    GROUP BY experiment_id, phase
);

-- 63. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_phase_settings ON CLUSTER analytics AS
SELECT
    experiment_id, phase, conversion_window_hours, sequential_tuning,
    -- 0: the phase has not ended (no later phase loaded, no endAt). `phase` goes into the
    -- lambda as an array: 18.x does not see a column that only a lambda reads, and
    -- `SELECT phase_end_ms` alone then failed.
    arrayReduce('min', arrayFilter(t -> t > 0, [
        arrayReduce('min', arrayFilter((t, q, p) -> q > p, phase_starts, phases,
            arrayResize([phase], length(phases), phase))),
        end_at_ms])) AS phase_end_ms
FROM (
    SELECT
        experiment_id, phase,
        -- The window of the phase's current definition; the tuning of its first that
        -- sets one (a later change within the phase is not taken: start a new phase).
        argMax(conversion_window_hours, loaded) AS conversion_window_hours,
        argMinIf(sequential_tuning, loaded, sequential_tuning > 0) AS sequential_tuning,
        argMax(end_at_ms, loaded) AS end_at_ms
    FROM (
        SELECT
            experiment_id, phase, conversion_window_hours, sequential_tuning,
            toUnixTimestamp64Milli(loaded_at) AS loaded,
            ifNull(toInt64(toUnixTimestamp(end_at)) * 1000, toInt64(0)) AS end_at_ms
        FROM analytics.experiment_variants FINAL
    ) AS definitions
    GROUP BY experiment_id, phase
) AS phases
ANY LEFT JOIN (
    -- A phase ends when a later one is first loaded.
    SELECT experiment_id, groupArray(phase) AS phases, groupArray(started) AS phase_starts
    FROM (
        SELECT experiment_id, phase, min(toUnixTimestamp64Milli(loaded_at)) AS started
        FROM analytics.experiment_variants FINAL
        GROUP BY experiment_id, phase
    ) AS first_loads
    GROUP BY experiment_id
) AS later_phases USING (experiment_id);

-- 64. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_visitor_exposures ON CLUSTER analytics AS
-- Each exposed visitor that `visitor_filter` keeps (the view: all), as
-- experiment_visitor_exposures has them: their arm, first exposure, conversion within their
-- window, maturity; their first arm and when they saw a second (`multiple_from_ms`, the start
-- of that hour; 0: never), from which on they count in `__multiple__`.
SELECT
    public_key, experiment_id, phase, visitor_id, variant_id, first_exposure,
    toUInt8(candidate_ms > 0 AND (window_end_ms = 0 OR candidate_ms <= window_end_ms))
        AS converted,
    max_time_on_page,
    first_exposure_ms,
    if(converted = 1, candidate_ms, toInt64(0)) AS conversion_ms,
    window_end_ms,
    toUInt8(window_end_ms > 0 AND window_end_ms <= toInt64(toUnixTimestamp(now())) * 1000)
        AS mature,
    first_variant_id,
    multiple_from_ms
FROM (
    SELECT
        *,
        -- The window: the experiment's hours from the first exposure, else to the end of
        -- the phase (0 while it runs).
        if(conversion_window_hours > 0,
            first_exposure_ms + toInt64(conversion_window_hours * 3600000),
            phase_end_ms) AS window_end_ms
    FROM (
        SELECT
            public_key, experiment_id, phase, visitor_id,
            if(n > 1, '__multiple__', v0) AS variant_id,
            v0 AS first_variant_id,
            t0 AS first_exposure,
            top AS max_time_on_page,
            toUnixTimestamp64Milli(t0) AS first_exposure_ms,
            -- The hour of the first exposure to another arm than the first: of the arm
            -- first or last by its hash that is not the first (exactly the second arm's
            -- for a visitor of two; the earlier of those two for more).
            cityHash64(v0) % 4294967296 AS first_hash,
            toInt64(least_arm % 4294967296) AS least_arm_hour,
            toInt64(4294967295 - greatest_arm % 4294967296) AS greatest_arm_hour,
            if(n > 1, multiIf(intDiv(least_arm, 4294967296) = first_hash, greatest_arm_hour,
                intDiv(greatest_arm, 4294967296) = first_hash, least_arm_hour,
                least(least_arm_hour, greatest_arm_hour)) * 3600000, toInt64(0))
                AS multiple_from_ms,
            -- The first conversion at or after the first exposure (0: none): conversions
            -- before it, or after it in any number, change nothing. (On 18.x a lambda
            -- reads the columns of its arrays only: the first exposure goes in as one.)
            arrayMap(c -> toUnixTimestamp64Milli(c), conversion_times) AS conversions_ms,
            arrayFilter((c, first) -> c >= first, conversions_ms,
                arrayResize([first_exposure_ms], length(conversions_ms), first_exposure_ms))
                AS after_exposure,
            if(empty(after_exposure), toInt64(0), arrayReduce('min', after_exposure))
                AS candidate_ms
        FROM (
            SELECT
                toString(public_key) AS public_key,
                toString(experiment_id) AS experiment_id,
                phase,
                visitor_id,
                uniqExactIfMerge(variants) AS n,
                argMinIfMerge(first_variant) AS v0,
                minIfMerge(first_exposure) AS t0,
                minIfMerge(least_arm) AS least_arm,
                maxIfMerge(greatest_arm) AS greatest_arm,
                groupUniqArrayIfMerge(conversions) AS conversion_times,
                maxIfMerge(exposure_excluded) AS out,
                if(maxMerge(has_time_on_page) = 1, toNullable(maxIfMerge(max_time_on_page)),
                    NULL) AS top
            FROM analytics.experiment_visitors
            WHERE 1
            GROUP BY public_key, experiment_id, phase, visitor_id
        ) AS merged
        WHERE n > 0 AND out = 0
    ) AS visitors
    ANY LEFT JOIN (
        SELECT experiment_id, phase, conversion_window_hours, phase_end_ms
        FROM analytics.experiment_phase_settings
    ) AS settings USING (experiment_id, phase)
);

-- 65. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_variant_counts ON CLUSTER analytics AS
SELECT
    public_key, experiment_id, phase, variant_id, exposed, converted,
    is_control, weight, defined, mature_exposed, mature_converted, first_exposure_ms
FROM (
    SELECT
        public_key, experiment_id, phase, variant_id,
        count() AS exposed,
        countIf(has_converted) AS converted,
        countIf(is_mature) AS mature_exposed,
        countIf(is_mature AND has_converted) AS mature_converted,
        min(first_ms) AS first_exposure_ms
    FROM (
        SELECT
            public_key, experiment_id, phase, variant_id, converted AS has_converted,
            mature AS is_mature, first_exposure_ms AS first_ms
        FROM analytics.experiment_visitor_exposures
    ) AS visitors
    GROUP BY public_key, experiment_id, phase, variant_id
) AS counts
ANY LEFT JOIN (
    SELECT experiment_id, phase, variant_id, is_control, weight, toUInt8(1) AS defined
    FROM analytics.experiment_phase_variants
) AS definitions USING (experiment_id, phase, variant_id);

-- 66. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_variant_counts_over_time ON CLUSTER analytics AS
SELECT
    public_key, experiment_id, phase, toDateTime(hour_s, 'UTC') AS hour, variant_id,
    toUInt64(arraySum(arrayFilter((n, h) -> h <= hour_s, new_exposed, variant_hours)))
        AS exposed,
    toUInt64(arraySum(arrayFilter((n, h) -> h <= hour_s, new_converted, variant_hours)))
        AS converted,
    is_control, weight, defined,
    toUInt64(arraySum(arrayFilter((n, h) -> h <= hour_s, new_mature, variant_hours)))
        AS mature_exposed,
    toUInt64(arraySum(arrayFilter((n, h) -> h <= hour_s, new_mature_converted, variant_hours)))
        AS mature_converted,
    first_exposure_ms
FROM (
    -- Each variant's steps per hour beside every hour of its experiment and phase that
    -- has one, so that each variant has a row at each of them.
    SELECT
        public_key, experiment_id, phase, variant_id, variant_hours, new_exposed,
        new_converted, new_mature, new_mature_converted, first_exposure_ms, hours
    FROM (
        SELECT
            public_key, experiment_id, phase,
            groupArray(variant_id) AS variant_ids,
            groupArray(variant_hours) AS hours_of,
            groupArray(new_exposed) AS exposed_of,
            groupArray(new_converted) AS converted_of,
            groupArray(new_mature) AS mature_of,
            groupArray(new_mature_converted) AS mature_converted_of,
            groupArray(first_exposure_ms) AS firsts,
            groupUniqArrayArray(variant_hours) AS hours
        FROM (
            SELECT
                public_key, experiment_id, phase, variant_id,
                groupArray(hour_s) AS variant_hours,
                groupArray(exposed) AS new_exposed,
                groupArray(converted) AS new_converted,
                groupArray(mature) AS new_mature,
                groupArray(mature_converted) AS new_mature_converted,
                min(first_ms) AS first_exposure_ms
            FROM (
                -- A visitor steps in at the hour of their first exposure, their conversion
                -- (within the window) and the end of their window (once past), each counted
                -- from then on in the arm they stand in then: their first, or
                -- `__multiple__` from the hour they saw a second arm. At that hour they
                -- move: what they added to their first arm before it goes to
                -- `__multiple__`. Only their own events up to an hour decide its counts, so
                -- an hour's row never changes once every event before its end is in.
                SELECT
                    public_key, experiment_id, phase, step.2 AS variant_id, step.1 AS hour_s,
                    sum(step.3) AS exposed,
                    sum(step.4) AS converted,
                    sum(step.5) AS mature,
                    sum(step.6) AS mature_converted,
                    min(step.7) AS first_ms
                FROM (
                    SELECT
                        public_key, experiment_id, phase,
                        intDiv(multiple_from_ms, 1000) AS moved_s,
                        if(converted = 1, intDiv(conversion_ms, 3600000) * 3600, 0)
                            AS conversion_s,
                        if(mature = 1, intDiv(window_end_ms, 3600000) * 3600, 0) AS maturity_s,
                        toInt64(conversion_s > 0 AND conversion_s < moved_s) AS converted_before,
                        toInt64(maturity_s > 0 AND maturity_s < moved_s) AS mature_before,
                        arrayJoin(arrayFilter(s -> s.1 > 0, [
                            (intDiv(first_exposure_ms, 3600000) * 3600, first_variant_id,
                                toInt64(1), toInt64(0), toInt64(0), toInt64(0),
                                first_exposure_ms),
                            (conversion_s, if(moved_s > 0 AND conversion_s >= moved_s,
                                '__multiple__', first_variant_id),
                                toInt64(0), toInt64(1), toInt64(0), toInt64(0),
                                first_exposure_ms),
                            (maturity_s, if(moved_s > 0 AND maturity_s >= moved_s,
                                '__multiple__', first_variant_id),
                                toInt64(0), toInt64(0), toInt64(1), toInt64(converted),
                                first_exposure_ms),
                            (moved_s, first_variant_id, toInt64(-1), -converted_before,
                                -mature_before, -(mature_before * converted),
                                first_exposure_ms),
                            (moved_s, '__multiple__', toInt64(1), converted_before,
                                mature_before, mature_before * converted, multiple_from_ms)
                        ])) AS step
                    FROM analytics.experiment_visitor_exposures
                ) AS steps
                GROUP BY public_key, experiment_id, phase, variant_id, hour_s
            ) AS per_hour
            GROUP BY public_key, experiment_id, phase, variant_id
        ) AS per_variant
        GROUP BY public_key, experiment_id, phase
    ) AS per_phase
    ARRAY JOIN
        variant_ids AS variant_id,
        hours_of AS variant_hours,
        exposed_of AS new_exposed,
        converted_of AS new_converted,
        mature_of AS new_mature,
        mature_converted_of AS new_mature_converted,
        firsts AS first_exposure_ms
) AS variants
ARRAY JOIN hours AS hour_s
ANY LEFT JOIN (
    SELECT experiment_id, phase, variant_id, is_control, weight, toUInt8(1) AS defined
    FROM analytics.experiment_phase_variants
) AS definitions USING (experiment_id, phase, variant_id)
-- A variant appears from the hour of its first exposure on.
WHERE exposed > 0;

-- 67. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_results ON CLUSTER analytics AS
SELECT
    public_key, experiment_id, phase, variant_id, is_control, exposed, converted,
    arm_rate AS conversion_rate,
    if(comparable, if(is_control = 1, 0, raw_diff), NULL) AS diff,
    if(testable, raw_diff - 1.959963984540054 * se, NULL) AS ci_low,
    if(testable, raw_diff + 1.959963984540054 * se, NULL) AS ci_high,
    if(testable, erfc(abs(raw_diff / se_null) / sqrt(2)), NULL) AS p_value,
    if(srm_k BETWEEN 2 AND 10 AND srm_n > 0,
        if(srm_df % 2 = 0,
            exp(-srm_x / 2) * (1 + (srm_df >= 4) * (srm_x / 2)
                + (srm_df >= 6) * pow(srm_x / 2, 2) / 2 + (srm_df >= 8) * pow(srm_x / 2, 3) / 6),
            erfc(sqrt(srm_x / 2)) + sqrt(2 / pi()) * exp(-srm_x / 2) * ((srm_df >= 3) * sqrt(srm_x)
                + (srm_df >= 5) * pow(srm_x, 1.5) / 3 + (srm_df >= 7) * pow(srm_x, 2.5) / 15
                + (srm_df >= 9) * pow(srm_x, 3.5) / 105)),
        NULL) AS srm_p_value,
    if(testable,
        least(1, family * sqrt(1 + n_rho2)
            * exp(-pow(raw_diff / se_always_valid, 2) / 2 * n_rho2 / (1 + n_rho2))),
        NULL) AS always_valid_p_value,
    if(testable, raw_diff - always_valid_half, NULL) AS always_valid_ci_low,
    if(testable, raw_diff + always_valid_half, NULL) AS always_valid_ci_high,
    no_test_reason,
    mature_exposed AS mature_visitors,
    mature_converted,
    if(mature_exposed > 0, mature_arm_rate, NULL) AS mature_conversion_rate,
    if(mature_comparable, if(is_control = 1, 0, mature_raw_diff), NULL) AS mature_diff,
    if(mature_testable, mature_raw_diff - 1.959963984540054 * mature_se, NULL) AS mature_ci_low,
    if(mature_testable, mature_raw_diff + 1.959963984540054 * mature_se, NULL) AS mature_ci_high,
    if(mature_testable, erfc(abs(mature_raw_diff / mature_se_null) / sqrt(2)), NULL) AS mature_p_value,
    if(mature_testable,
        least(1, family * sqrt(1 + mature_n_rho2)
            * exp(-pow(mature_raw_diff / mature_se_always_valid, 2) / 2 * mature_n_rho2 / (1 + mature_n_rho2))),
        NULL) AS mature_always_valid_p_value,
    if(mature_testable, mature_raw_diff - mature_always_valid_half, NULL) AS mature_always_valid_ci_low,
    if(mature_testable, mature_raw_diff + mature_always_valid_half, NULL) AS mature_always_valid_ci_high,
    mature_no_test_reason,
    tuning AS sequential_tuning,
    family AS treatments,
    if(comparable AND control_rate > 0, if(is_control = 1, 0, raw_lift), NULL) AS lift,
    if(testable, raw_lift - 1.959963984540054 * se_lift, NULL) AS lift_ci_low,
    if(testable, raw_lift + 1.959963984540054 * se_lift, NULL) AS lift_ci_high,
    -- The always-valid interval of the difference, as wide in the lift's standard errors.
    if(testable, raw_lift - always_valid_half * se_lift / se, NULL)
        AS always_valid_lift_ci_low,
    if(testable, raw_lift + always_valid_half * se_lift / se, NULL)
        AS always_valid_lift_ci_high,
    toDateTime(now(), 'UTC') AS as_of
FROM (
    SELECT
        *,
        converted / exposed AS arm_rate,
        control_converted / control_exposed AS control_rate,
        arm_rate - control_rate AS raw_diff,
        sqrt(arm_rate * (1 - arm_rate) / exposed
            + control_rate * (1 - control_rate) / control_exposed) AS se,
        -- The fixed-horizon test's standard error under its null (one rate for both arms,
        -- pooled: statsmodels' proportions_ztest).
        (converted + control_converted) / (exposed + control_exposed)
            AS pooled_rate,
        sqrt(pooled_rate * (1 - pooled_rate) * (1 / exposed + 1 / control_exposed))
            AS se_null,
        -- The always-valid test's: the larger of the two. The unpooled one alone shrinks
        -- with a small arm's rare conversions (1 of 700 against 133 of 13,300 read as
        -- p = 1.6e-5); the pooled one alone with a small arm's many. docs/results.md.
        greatest(se, se_null) AS se_always_valid,
        -- The lift, arm / control - 1, and its standard error by the delta method on the
        -- ratio of the means (gbstats' relative difference).
        raw_diff / control_rate AS raw_lift,
        sqrt(arm_rate * (1 - arm_rate) / exposed / pow(control_rate, 2)
            + control_rate * (1 - control_rate) / control_exposed
                * pow(arm_rate, 2) / pow(control_rate, 4)) AS se_lift,
        controls = 1 AND control_exposed > 0 AND variant_id != '__multiple__' AND defined = 1
            AS comparable,
        -- No statistic where an arm's variance is zero (no conversion, or all converted)
        -- or below the minimum-data guard (visitors per arm; conversions and
        -- non-conversions of both arms together).
        converted > 0 AND converted < exposed
            AND control_converted > 0 AND control_converted < control_exposed
            AS variances,
        exposed >= 50 AND control_exposed >= 50
            AND converted + control_converted >= 5
            AND exposed + control_exposed - converted - control_converted
                >= 5
            AS enough,
        comparable AND is_control = 0 AND se > 0 AND variances AND enough
            AS testable,
        multiIf(controls = 1 AND defined = 0, 'the phase does not define this variant',
            NOT comparable OR is_control = 1, '',
            NOT enough, 'not enough data',
            NOT variances, 'an arm has no variance (no conversion, or all converted)',
            '') AS no_test_reason,
        (exposed + control_exposed) * (family_bound + log(family_bound + 1)) / tuning
            AS n_rho2,
        se_always_valid
            * sqrt((1 + n_rho2) / n_rho2 * (log(1 + n_rho2) + family_bound))
            AS always_valid_half,
        mature_converted / mature_exposed AS mature_arm_rate,
        mature_control_converted / mature_control_exposed AS mature_control_rate,
        mature_arm_rate - mature_control_rate AS mature_raw_diff,
        sqrt(mature_arm_rate * (1 - mature_arm_rate) / mature_exposed
            + mature_control_rate * (1 - mature_control_rate) / mature_control_exposed) AS mature_se,
        -- The fixed-horizon test's standard error under its null (one rate for both arms,
        -- pooled: statsmodels' proportions_ztest).
        (mature_converted + mature_control_converted) / (mature_exposed + mature_control_exposed)
            AS mature_pooled_rate,
        sqrt(mature_pooled_rate * (1 - mature_pooled_rate) * (1 / mature_exposed + 1 / mature_control_exposed))
            AS mature_se_null,
        -- The always-valid test's: the larger of the two. The unpooled one alone shrinks
        -- with a small arm's rare conversions (1 of 700 against 133 of 13,300 read as
        -- p = 1.6e-5); the pooled one alone with a small arm's many. docs/results.md.
        greatest(mature_se, mature_se_null) AS mature_se_always_valid,
        -- The lift, arm / control - 1, and its standard error by the delta method on the
        -- ratio of the means (gbstats' relative difference).
        mature_raw_diff / mature_control_rate AS mature_raw_lift,
        sqrt(mature_arm_rate * (1 - mature_arm_rate) / mature_exposed / pow(mature_control_rate, 2)
            + mature_control_rate * (1 - mature_control_rate) / mature_control_exposed
                * pow(mature_arm_rate, 2) / pow(mature_control_rate, 4)) AS mature_se_lift,
        controls = 1 AND mature_control_exposed > 0 AND variant_id != '__multiple__' AND defined = 1
            AS mature_comparable,
        -- No statistic where an arm's variance is zero (no conversion, or all converted)
        -- or below the minimum-data guard (visitors per arm; conversions and
        -- non-conversions of both arms together).
        mature_converted > 0 AND mature_converted < mature_exposed
            AND mature_control_converted > 0 AND mature_control_converted < mature_control_exposed
            AS mature_variances,
        mature_exposed >= 50 AND mature_control_exposed >= 50
            AND mature_converted + mature_control_converted >= 5
            AND mature_exposed + mature_control_exposed - mature_converted - mature_control_converted
                >= 5
            AS mature_enough,
        mature_comparable AND is_control = 0 AND mature_se > 0 AND mature_variances AND mature_enough
            AS mature_testable,
        multiIf(controls = 1 AND defined = 0, 'the phase does not define this variant',
            NOT mature_comparable OR is_control = 1, '',
            NOT mature_enough, 'not enough data',
            NOT mature_variances, 'an arm has no variance (no conversion, or all converted)',
            '') AS mature_no_test_reason,
        (mature_exposed + mature_control_exposed) * (family_bound + log(family_bound + 1)) / tuning
            AS mature_n_rho2,
        mature_se_always_valid
            * sqrt((1 + mature_n_rho2) / mature_n_rho2 * (log(1 + mature_n_rho2) + family_bound))
            AS mature_always_valid_half,
        -- The treatments the always-valid verdicts share their error rate across
        -- (Bonferroni): the phase's defined variants with a weight, the control aside.
        greatest(toUInt64(ifNull(phase_treatments, 0)), 1) AS family,
        -- -2 ln(0.05 / family): the always-valid test at 5% / family (gbstats' rho and
        -- interval at that alpha), its p-value times the family.
        5.991464547107982 + 2 * log(family) AS family_bound,
        -- N*: the experiment's own (`sequentialTuning`), else the deployment's default in
        -- force when the phase's first exposure arrived, else 5000.
        if(snapshot_tuning > 0, snapshot_tuning,
            if(default_tuning > 0, default_tuning, 5000)) AS tuning,
        -- (18.x loses a column that only a lambda reads: the phase's start goes in as an
        -- array beside the settings.)
        arraySort((
            SELECT groupArray((toInt64(toUnixTimestamp(set_at)), value))
            FROM analytics.results_settings_log
            WHERE name = 'sequential_tuning' AND value > 0 AND isFinite(value)
        )) AS tuning_log,
        arrayElement(arrayFilter((s, start) -> s.1 <= start, tuning_log,
            arrayResize([intDiv(phase_start_ms, 1000)], length(tuning_log),
                intDiv(phase_start_ms, 1000))), -1).2 AS default_tuning,
        srm_k - 1 AS srm_df,
        greatest(srm_w / srm_n * srm_sum - srm_n, 0) AS srm_x
    FROM (
        -- The counts read once: each experiment's and phase's (and hour's) variants in
        -- arrays, with the control's counts and the sample-ratio sums beside them, then a row
        -- per variant.
        SELECT
            public_key, experiment_id, phase, variant_id, is_control, defined, exposed, converted,
            mature_exposed, mature_converted, controls, control_exposed, control_converted,
            mature_control_exposed, mature_control_converted, srm_n, srm_sum, phase_start_ms
        FROM (
            SELECT
                public_key, experiment_id, phase,
                groupArray(variant_id) AS variant_ids,
                groupArray(is_control) AS controls_flags,
                groupArray(defined) AS defined_flags,
                groupArray(exposed) AS exposed_counts,
                groupArray(converted) AS converted_counts,
                groupArray(mature_exposed) AS mature_exposed_counts,
                groupArray(mature_converted) AS mature_converted_counts,
                countIf(is_control = 1) AS controls,
                sumIf(exposed, is_control = 1) AS control_exposed,
                sumIf(converted, is_control = 1) AS control_converted,
                sumIf(mature_exposed, is_control = 1) AS mature_control_exposed,
                sumIf(mature_converted, is_control = 1) AS mature_control_converted,
                sumIf(exposed, weight > 0) AS srm_n,
                sumIf(exposed * exposed / weight, weight > 0) AS srm_sum,
                min(first_exposure_ms) AS phase_start_ms
            FROM analytics.experiment_variant_counts
            GROUP BY public_key, experiment_id, phase
        ) AS per_experiment
        ARRAY JOIN
            variant_ids AS variant_id,
            controls_flags AS is_control,
            defined_flags AS defined,
            exposed_counts AS exposed,
            converted_counts AS converted,
            mature_exposed_counts AS mature_exposed,
            mature_converted_counts AS mature_converted
    ) AS counts
    ANY LEFT JOIN (
        SELECT experiment_id, phase, srm_w, srm_k, phase_treatments, snapshot_tuning
        FROM (
            SELECT
                experiment_id, phase, sum(weight) AS srm_w, count() AS srm_k,
                countIf(is_control = 0) AS phase_treatments
            FROM analytics.experiment_phase_variants
            WHERE weight > 0
            GROUP BY experiment_id, phase
        ) AS weighted
        ANY LEFT JOIN (
            SELECT experiment_id, phase, sequential_tuning AS snapshot_tuning
            FROM analytics.experiment_phase_settings
        ) AS tunings USING (experiment_id, phase)
    ) AS weights USING (experiment_id, phase)
) AS statistics
;

-- 68. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_results_over_time ON CLUSTER analytics AS
SELECT
    public_key, experiment_id, phase, toDate(hour) AS day, hour, variant_id, is_control, exposed, converted,
    arm_rate AS conversion_rate,
    if(comparable, if(is_control = 1, 0, raw_diff), NULL) AS diff,
    if(testable, raw_diff - 1.959963984540054 * se, NULL) AS ci_low,
    if(testable, raw_diff + 1.959963984540054 * se, NULL) AS ci_high,
    if(testable, erfc(abs(raw_diff / se_null) / sqrt(2)), NULL) AS p_value,
    if(srm_k >= 2 AND srm_n > 0, srm_sequential_p, NULL) AS srm_p_value,
    if(testable,
        least(1, family * sqrt(1 + n_rho2)
            * exp(-pow(raw_diff / se_always_valid, 2) / 2 * n_rho2 / (1 + n_rho2))),
        NULL) AS always_valid_p_value,
    if(testable, raw_diff - always_valid_half, NULL) AS always_valid_ci_low,
    if(testable, raw_diff + always_valid_half, NULL) AS always_valid_ci_high,
    no_test_reason,
    mature_exposed AS mature_visitors,
    mature_converted,
    if(mature_exposed > 0, mature_arm_rate, NULL) AS mature_conversion_rate,
    if(mature_comparable, if(is_control = 1, 0, mature_raw_diff), NULL) AS mature_diff,
    if(mature_testable, mature_raw_diff - 1.959963984540054 * mature_se, NULL) AS mature_ci_low,
    if(mature_testable, mature_raw_diff + 1.959963984540054 * mature_se, NULL) AS mature_ci_high,
    if(mature_testable, erfc(abs(mature_raw_diff / mature_se_null) / sqrt(2)), NULL) AS mature_p_value,
    if(mature_testable,
        least(1, family * sqrt(1 + mature_n_rho2)
            * exp(-pow(mature_raw_diff / mature_se_always_valid, 2) / 2 * mature_n_rho2 / (1 + mature_n_rho2))),
        NULL) AS mature_always_valid_p_value,
    if(mature_testable, mature_raw_diff - mature_always_valid_half, NULL) AS mature_always_valid_ci_low,
    if(mature_testable, mature_raw_diff + mature_always_valid_half, NULL) AS mature_always_valid_ci_high,
    mature_no_test_reason,
    tuning AS sequential_tuning,
    family AS treatments,
    if(comparable AND control_rate > 0, if(is_control = 1, 0, raw_lift), NULL) AS lift,
    if(testable, raw_lift - 1.959963984540054 * se_lift, NULL) AS lift_ci_low,
    if(testable, raw_lift + 1.959963984540054 * se_lift, NULL) AS lift_ci_high,
    -- The always-valid interval of the difference, as wide in the lift's standard errors.
    if(testable, raw_lift - always_valid_half * se_lift / se, NULL)
        AS always_valid_lift_ci_low,
    if(testable, raw_lift + always_valid_half * se_lift / se, NULL)
        AS always_valid_lift_ci_high,
    toDateTime(now(), 'UTC') AS as_of
FROM (
    SELECT
        *,
        converted / exposed AS arm_rate,
        control_converted / control_exposed AS control_rate,
        arm_rate - control_rate AS raw_diff,
        sqrt(arm_rate * (1 - arm_rate) / exposed
            + control_rate * (1 - control_rate) / control_exposed) AS se,
        -- The fixed-horizon test's standard error under its null (one rate for both arms,
        -- pooled: statsmodels' proportions_ztest).
        (converted + control_converted) / (exposed + control_exposed)
            AS pooled_rate,
        sqrt(pooled_rate * (1 - pooled_rate) * (1 / exposed + 1 / control_exposed))
            AS se_null,
        -- The always-valid test's: the larger of the two. The unpooled one alone shrinks
        -- with a small arm's rare conversions (1 of 700 against 133 of 13,300 read as
        -- p = 1.6e-5); the pooled one alone with a small arm's many. docs/results.md.
        greatest(se, se_null) AS se_always_valid,
        -- The lift, arm / control - 1, and its standard error by the delta method on the
        -- ratio of the means (gbstats' relative difference).
        raw_diff / control_rate AS raw_lift,
        sqrt(arm_rate * (1 - arm_rate) / exposed / pow(control_rate, 2)
            + control_rate * (1 - control_rate) / control_exposed
                * pow(arm_rate, 2) / pow(control_rate, 4)) AS se_lift,
        controls = 1 AND control_exposed > 0 AND variant_id != '__multiple__' AND defined = 1
            AS comparable,
        -- No statistic where an arm's variance is zero (no conversion, or all converted)
        -- or below the minimum-data guard (visitors per arm; conversions and
        -- non-conversions of both arms together).
        converted > 0 AND converted < exposed
            AND control_converted > 0 AND control_converted < control_exposed
            AS variances,
        exposed >= 50 AND control_exposed >= 50
            AND converted + control_converted >= 5
            AND exposed + control_exposed - converted - control_converted
                >= 5
            AS enough,
        comparable AND is_control = 0 AND se > 0 AND variances AND enough
            AS testable,
        multiIf(controls = 1 AND defined = 0, 'the phase does not define this variant',
            NOT comparable OR is_control = 1, '',
            NOT enough, 'not enough data',
            NOT variances, 'an arm has no variance (no conversion, or all converted)',
            '') AS no_test_reason,
        (exposed + control_exposed) * (family_bound + log(family_bound + 1)) / tuning
            AS n_rho2,
        se_always_valid
            * sqrt((1 + n_rho2) / n_rho2 * (log(1 + n_rho2) + family_bound))
            AS always_valid_half,
        mature_converted / mature_exposed AS mature_arm_rate,
        mature_control_converted / mature_control_exposed AS mature_control_rate,
        mature_arm_rate - mature_control_rate AS mature_raw_diff,
        sqrt(mature_arm_rate * (1 - mature_arm_rate) / mature_exposed
            + mature_control_rate * (1 - mature_control_rate) / mature_control_exposed) AS mature_se,
        -- The fixed-horizon test's standard error under its null (one rate for both arms,
        -- pooled: statsmodels' proportions_ztest).
        (mature_converted + mature_control_converted) / (mature_exposed + mature_control_exposed)
            AS mature_pooled_rate,
        sqrt(mature_pooled_rate * (1 - mature_pooled_rate) * (1 / mature_exposed + 1 / mature_control_exposed))
            AS mature_se_null,
        -- The always-valid test's: the larger of the two. The unpooled one alone shrinks
        -- with a small arm's rare conversions (1 of 700 against 133 of 13,300 read as
        -- p = 1.6e-5); the pooled one alone with a small arm's many. docs/results.md.
        greatest(mature_se, mature_se_null) AS mature_se_always_valid,
        -- The lift, arm / control - 1, and its standard error by the delta method on the
        -- ratio of the means (gbstats' relative difference).
        mature_raw_diff / mature_control_rate AS mature_raw_lift,
        sqrt(mature_arm_rate * (1 - mature_arm_rate) / mature_exposed / pow(mature_control_rate, 2)
            + mature_control_rate * (1 - mature_control_rate) / mature_control_exposed
                * pow(mature_arm_rate, 2) / pow(mature_control_rate, 4)) AS mature_se_lift,
        controls = 1 AND mature_control_exposed > 0 AND variant_id != '__multiple__' AND defined = 1
            AS mature_comparable,
        -- No statistic where an arm's variance is zero (no conversion, or all converted)
        -- or below the minimum-data guard (visitors per arm; conversions and
        -- non-conversions of both arms together).
        mature_converted > 0 AND mature_converted < mature_exposed
            AND mature_control_converted > 0 AND mature_control_converted < mature_control_exposed
            AS mature_variances,
        mature_exposed >= 50 AND mature_control_exposed >= 50
            AND mature_converted + mature_control_converted >= 5
            AND mature_exposed + mature_control_exposed - mature_converted - mature_control_converted
                >= 5
            AS mature_enough,
        mature_comparable AND is_control = 0 AND mature_se > 0 AND mature_variances AND mature_enough
            AS mature_testable,
        multiIf(controls = 1 AND defined = 0, 'the phase does not define this variant',
            NOT mature_comparable OR is_control = 1, '',
            NOT mature_enough, 'not enough data',
            NOT mature_variances, 'an arm has no variance (no conversion, or all converted)',
            '') AS mature_no_test_reason,
        (mature_exposed + mature_control_exposed) * (family_bound + log(family_bound + 1)) / tuning
            AS mature_n_rho2,
        mature_se_always_valid
            * sqrt((1 + mature_n_rho2) / mature_n_rho2 * (log(1 + mature_n_rho2) + family_bound))
            AS mature_always_valid_half,
        -- The treatments the always-valid verdicts share their error rate across
        -- (Bonferroni): the phase's defined variants with a weight, the control aside.
        greatest(toUInt64(ifNull(phase_treatments, 0)), 1) AS family,
        -- -2 ln(0.05 / family): the always-valid test at 5% / family (gbstats' rho and
        -- interval at that alpha), its p-value times the family.
        5.991464547107982 + 2 * log(family) AS family_bound,
        -- N*: the experiment's own (`sequentialTuning`), else the deployment's default in
        -- force when the phase's first exposure arrived, else 5000.
        if(snapshot_tuning > 0, snapshot_tuning,
            if(default_tuning > 0, default_tuning, 5000)) AS tuning,
        -- (18.x loses a column that only a lambda reads: the phase's start goes in as an
        -- array beside the settings.)
        arraySort((
            SELECT groupArray((toInt64(toUnixTimestamp(set_at)), value))
            FROM analytics.results_settings_log
            WHERE name = 'sequential_tuning' AND value > 0 AND isFinite(value)
        )) AS tuning_log,
        arrayElement(arrayFilter((s, start) -> s.1 <= start, tuning_log,
            arrayResize([intDiv(phase_start_ms, 1000)], length(tuning_log),
                intDiv(phase_start_ms, 1000))), -1).2 AS default_tuning,
        srm_k - 1 AS srm_df,
        greatest(srm_w / srm_n * srm_sum - srm_n, 0) AS srm_x
    FROM (
        -- The counts read once: each experiment's and phase's (and hour's) variants in
        -- arrays, with the control's counts and the sample-ratio sums beside them, then a row
        -- per variant.
        SELECT
            public_key, experiment_id, phase, hour, variant_id, is_control, defined, exposed, converted,
            mature_exposed, mature_converted, controls, control_exposed, control_converted,
            mature_control_exposed, mature_control_converted, srm_n, srm_sum, phase_start_ms
        FROM (
            SELECT
                public_key, experiment_id, phase, hour,
                groupArray(variant_id) AS variant_ids,
                groupArray(is_control) AS controls_flags,
                groupArray(defined) AS defined_flags,
                groupArray(exposed) AS exposed_counts,
                groupArray(converted) AS converted_counts,
                groupArray(mature_exposed) AS mature_exposed_counts,
                groupArray(mature_converted) AS mature_converted_counts,
                countIf(is_control = 1) AS controls,
                sumIf(exposed, is_control = 1) AS control_exposed,
                sumIf(converted, is_control = 1) AS control_converted,
                sumIf(mature_exposed, is_control = 1) AS mature_control_exposed,
                sumIf(mature_converted, is_control = 1) AS mature_control_converted,
                sumIf(exposed, weight > 0) AS srm_n,
                sumIf(exposed * exposed / weight, weight > 0) AS srm_sum,
                min(first_exposure_ms) AS phase_start_ms
            FROM analytics.experiment_variant_counts_over_time
            GROUP BY public_key, experiment_id, phase, hour
        ) AS per_experiment
        ARRAY JOIN
            variant_ids AS variant_id,
            controls_flags AS is_control,
            defined_flags AS defined,
            exposed_counts AS exposed,
            converted_counts AS converted,
            mature_exposed_counts AS mature_exposed,
            mature_converted_counts AS mature_converted
    ) AS counts
    ANY LEFT JOIN (
        SELECT experiment_id, phase, srm_w, srm_k, phase_treatments, snapshot_tuning
        FROM (
            SELECT
                experiment_id, phase, sum(weight) AS srm_w, count() AS srm_k,
                countIf(is_control = 0) AS phase_treatments
            FROM analytics.experiment_phase_variants
            WHERE weight > 0
            GROUP BY experiment_id, phase
        ) AS weighted
        ANY LEFT JOIN (
            SELECT experiment_id, phase, sequential_tuning AS snapshot_tuning
            FROM analytics.experiment_phase_settings
        ) AS tunings USING (experiment_id, phase)
    ) AS weights USING (experiment_id, phase)
) AS statistics
ANY LEFT JOIN (
    -- The sample-ratio check under hourly looks: a Dirichlet-multinomial Bayes factor of
    -- the exposed counts against the weights (Lindon & Malek, 2022; prior concentration
    -- 1000.0 centred on the weights), its p-value 1 / the largest factor so far.
    SELECT
        public_key, experiment_id, phase, toDateTime(hour_s, 'UTC') AS hour,
        least(1, exp(-running_max)) AS srm_sequential_p
    FROM (
        SELECT
            public_key, experiment_id, phase,
            arraySort(hours) AS sorted_hours,
            arraySort((l, h) -> h, log_factors, hours) AS sorted_factors,
            arrayMap(i -> arrayReduce('max', arraySlice(sorted_factors, 1, i)),
                arrayEnumerate(sorted_factors)) AS running_maxima
        FROM (
            SELECT
                public_key, experiment_id, phase,
                groupArray(toUInt32(hour)) AS hours,
                groupArray(log_factor) AS log_factors
            FROM (
                SELECT
                    public_key, experiment_id, phase, hour,
                    lgamma(1000.0) - lgamma(1000.0 + sum(exposed))
                        + sum(lgamma(prior + exposed) - lgamma(prior)
                            - exposed * log(weight / total_weight)) AS log_factor
                FROM (
                    SELECT
                        public_key, experiment_id, phase, hour, exposed, weight, total_weight,
                        1000.0 * weight / total_weight AS prior
                    FROM analytics.experiment_variant_counts_over_time
                    ANY LEFT JOIN (
                        SELECT experiment_id, phase, sum(weight) AS total_weight
                        FROM analytics.experiment_phase_variants
                        WHERE weight > 0
                        GROUP BY experiment_id, phase
                    ) AS totals USING (experiment_id, phase)
                    WHERE weight > 0 AND total_weight > 0
                ) AS weighted
                GROUP BY public_key, experiment_id, phase, hour
            ) AS per_hour
            GROUP BY public_key, experiment_id, phase
        ) AS per_phase
    ) AS sequences
    ARRAY JOIN sorted_hours AS hour_s, running_maxima AS running_max
) AS srm_sequential USING (public_key, experiment_id, phase, hour);

-- 69. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_metric_definitions ON CLUSTER analytics AS
-- Each experiment's metrics as last loaded: a metric added or changed applies to the
-- events already stored.
SELECT
    experiment_id, metric_id, role, position, kind,
    num_event, num_click_target, num_conversion, num_field, num_aggregate,
    den_event, den_click_target, den_conversion, den_field, den_aggregate,
    cap_value, cap_percentile, higher_is_better, cuped_lookback_days, definition,
    version, loaded_at
FROM analytics.experiment_metrics FINAL
WHERE (experiment_id, loaded_at) IN (
    SELECT experiment_id, max(loaded_at)
    FROM analytics.experiment_metrics FINAL
    GROUP BY experiment_id
);

-- 70. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_metric_freshness ON CLUSTER analytics AS
-- One row per visitor with stored metric values (visitor_metric_values), by
-- `visitor_key` (a hash of the public key and the visitor id): their latest refresh, the
-- rows of `events` it read (`events_seen`) and those there are now (`events`,
-- visitor_event_counts), and `fresh`: 1 when the two are equal and the metric definitions
-- and phase settings of every row of that refresh are still the current ones. Two
-- visitors of one key read as stale (their counts add up), so their values are computed
-- from the events.
-- A fixed-size key: grouping, joining and testing it costs a fraction of what the two
-- strings cost, at millions of visitors.
SELECT
    visitor_key, intDiv(top_mark, 2) AS latest_refresh, events_seen, events,
    toUInt8(top_mark % 2 = 0 AND events = events_seen) AS fresh
FROM (
    -- A stored row's mark: its refresh doubled, plus 1 when its settings changed since
    -- (0 for a count's row). The largest is the latest refresh's, odd when any row of it
    -- is not current. One pass over both tables, rather than a join of their groups.
    SELECT
        visitor_key, max(mark) AS top_mark, argMax(seen, mark) AS events_seen,
        sum(counted) AS events
    FROM (
        SELECT
            cityHash64(public_key, visitor_id) AS visitor_key, events_seen AS seen,
            refresh_id * 2 + toUInt64((experiment_id, phase, settings_hash) GLOBAL NOT IN (
                SELECT experiment_id, phase, current_settings_hash
                FROM (SELECT
    *,
    -- Everything besides the events that a visitor's stored values depend on, and the
    -- migration that last changed what a refresh stores (21: `pre_seen`): a stored value
    -- of an older one is stale, and the sweep computes it again.
    sipHash64(definitions_hash, conversion_window_hours, phase_end_ms, 21)
        AS current_settings_hash
FROM (
    SELECT *
    FROM (
    SELECT DISTINCT CAST(experiment_id AS String) AS experiment_id, phase
    FROM analytics.experiment_visitors
    UNION ALL SELECT '' AS experiment_id, toUInt32(0) AS phase) AS hashed_rows
    ANY LEFT JOIN (
        SELECT
            experiment_id,
            sipHash64(toString(arraySort(groupArray((metric_id, num_event, num_click_target,
                num_conversion, num_field, toString(num_aggregate), den_event,
                den_click_target, den_conversion, den_field, toString(den_aggregate),
                cuped_lookback_days))))) AS definitions_hash
        FROM analytics.experiment_metric_definitions
        GROUP BY experiment_id
    ) AS definitions USING (experiment_id)
) AS with_definitions
ANY LEFT JOIN (
    SELECT experiment_id, phase, conversion_window_hours, phase_end_ms
    FROM analytics.experiment_phase_settings
) AS settings USING (experiment_id, phase)) AS current
            )) AS mark,
            toUInt64(0) AS counted
        FROM analytics.visitor_metric_values
        UNION ALL
        SELECT
            cityHash64(public_key, visitor_id) AS visitor_key, toUInt64(0) AS seen, toUInt64(0) AS mark,
            events AS counted
        FROM analytics.visitor_event_counts
    ) AS rows
    GROUP BY visitor_key
) AS visitors
WHERE top_mark > 0;

-- 71. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_metric_stored ON CLUSTER analytics AS
-- One row per stored metric (visitor_metric_values) of each visitor's latest refresh, or
-- one of metric '' for a visitor with none, with the visitor's `fresh`
-- (experiment_metric_freshness).
SELECT
    public_key, visitor_id, refresh_id, experiment_id, phase, metric_id, variant_id,
    first_exposure_ms, value, denominator, pre_value, pre_seen, fresh
FROM (
    SELECT
        CAST(public_key AS String) AS public_key, visitor_id, refresh_id, experiment_id,
        phase, metric_id, variant_id, first_exposure_ms, value, denominator, pre_value,
        pre_seen, visitor_key
    FROM (
        SELECT
            *, cityHash64(public_key, visitor_id) AS visitor_key, metrics.metric_id AS metric_id,
            metrics.value AS value, metrics.denominator AS denominator,
            metrics.pre_value AS pre_value, metrics.pre_seen AS pre_seen
        FROM analytics.visitor_metric_values
        LEFT ARRAY JOIN metrics
    ) AS keyed
) AS stored
ANY INNER JOIN (
    SELECT visitor_key, latest_refresh AS refresh_id, fresh
    FROM analytics.experiment_metric_freshness
) AS latest USING (visitor_key, refresh_id);

-- 72. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_metric_stale ON CLUSTER analytics AS
-- The visitors whose stored values are missing or stale (experiment_metric_freshness),
-- with their latest refresh (0: none): what the consumer refreshes.
SELECT public_key, visitor_id, latest_refresh
FROM (
    SELECT public_key, visitor_id, cityHash64(public_key, visitor_id) AS visitor_key
    FROM (
        SELECT toString(public_key) AS public_key, visitor_id
        FROM analytics.visitor_event_counts
        GROUP BY public_key, visitor_id
    ) AS visitors
) AS counted
ANY LEFT JOIN (
    SELECT visitor_key, latest_refresh, fresh
    FROM analytics.experiment_metric_freshness
) AS stored USING (visitor_key)
WHERE fresh = 0;

-- 73. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_metric_visitors ON CLUSTER analytics AS
-- One row per exposed visitor and metric of their experiment: the values of the visitor's
-- latest refresh, as the consumer stored them (visitor_metric_values: a row per visitor,
-- experiment and phase, the metrics in arrays). Nothing is computed from the events here:
-- the results are as of the refreshes (`as_of`).
--
-- A refresh lands whole (one insert of one block), and `FINAL` reads one set of parts,
-- keeping each row of the latest refresh that landed (the table replaces a row by the one
-- inserted after it). So each visitor comes from one refresh, whole, even while refreshes
-- land and merge during the query. A metric dropped from the definitions since the
-- visitor's refresh is left out by the join with the current definitions. In a cluster each
-- shard reads its own part, which holds all of its visitors' rows.
SELECT
    public_key, experiment_id, phase, visitor_id, variant_id, metric_id, role, position,
    kind, higher_is_better, cap_value, cap_percentile, cuped_lookback_days,
    first_exposure_ms, value, denominator, pre_value, pre_seen
FROM (
    SELECT
        public_key, experiment_id, phase, visitor_id, metric_id, variant_id,
        first_exposure_ms, value, denominator, pre_value, pre_seen
    FROM (-- Each visitor's latest stored refresh per experiment and phase (visitor_metric_values
-- FINAL), its metrics in the arrays `stored_ids`, `stored_values`, `stored_denominators`,
-- `stored_pre_values` and `stored_pre_seen`. `public_key` is cast to `String`, for the joins' same types
-- (18.x: a function of a LowCardinality column is one).
--
-- Read in 4 streams: 18.x merges a FINAL in one stream, and runs all that
-- reads it in that one thread. Each stream merges its own share of the visitors, by a
-- hash of `visitor_id`: a column of the sorting key, so every version of a row is in the
-- same share, and PREWHERE may filter before the merge.
SELECT
    CAST(public_key AS String) AS public_key, experiment_id, phase, visitor_id, variant_id,
    first_exposure_ms, metrics.metric_id AS stored_ids, metrics.value AS stored_values,
    metrics.denominator AS stored_denominators, metrics.pre_value AS stored_pre_values,
    metrics.pre_seen AS stored_pre_seen
FROM analytics.visitor_metric_values FINAL
PREWHERE cityHash64(visitor_id) % 4 = 0
UNION ALL
SELECT
    CAST(public_key AS String) AS public_key, experiment_id, phase, visitor_id, variant_id,
    first_exposure_ms, metrics.metric_id AS stored_ids, metrics.value AS stored_values,
    metrics.denominator AS stored_denominators, metrics.pre_value AS stored_pre_values,
    metrics.pre_seen AS stored_pre_seen
FROM analytics.visitor_metric_values FINAL
PREWHERE cityHash64(visitor_id) % 4 = 1
UNION ALL
SELECT
    CAST(public_key AS String) AS public_key, experiment_id, phase, visitor_id, variant_id,
    first_exposure_ms, metrics.metric_id AS stored_ids, metrics.value AS stored_values,
    metrics.denominator AS stored_denominators, metrics.pre_value AS stored_pre_values,
    metrics.pre_seen AS stored_pre_seen
FROM analytics.visitor_metric_values FINAL
PREWHERE cityHash64(visitor_id) % 4 = 2
UNION ALL
SELECT
    CAST(public_key AS String) AS public_key, experiment_id, phase, visitor_id, variant_id,
    first_exposure_ms, metrics.metric_id AS stored_ids, metrics.value AS stored_values,
    metrics.denominator AS stored_denominators, metrics.pre_value AS stored_pre_values,
    metrics.pre_seen AS stored_pre_seen
FROM analytics.visitor_metric_values FINAL
PREWHERE cityHash64(visitor_id) % 4 = 3) AS stored
    ARRAY JOIN
        stored_ids AS metric_id, stored_values AS value,
        stored_denominators AS denominator, stored_pre_values AS pre_value,
        stored_pre_seen AS pre_seen
) AS metric_values
ALL INNER JOIN (
    SELECT
        experiment_id, metric_id, toString(role) AS role, position, toString(kind) AS kind,
        higher_is_better, cap_value, cap_percentile, cuped_lookback_days
    FROM analytics.experiment_metric_definitions
) AS definitions USING (experiment_id, metric_id);

-- 74. runs once
CREATE VIEW IF NOT EXISTS analytics.experiment_metric_results ON CLUSTER analytics AS
SELECT
    public_key, experiment_id, phase, metric_id, role, position, kind, higher_is_better,
    variant_id, is_control,
    toUInt64(n) AS visitors,
    value,
    if(comparable, if(is_control = 1, 0, raw_diff), NULL) AS diff,
    -- The fixed horizon: gbstats' TwoSidedTTest, Welch's t.
    if(testable, raw_diff - t_quantile * se, NULL) AS ci_low,
    if(testable, raw_diff + t_quantile * se, NULL) AS ci_high,
    if(testable, if(abs(t_stat) > 40, 0, greatest(0, 1 - 2 * ((abs(t_stat))
    * if(((dof) / 2) < 500, exp(lgamma(((dof) / 2) + 0.5) - lgamma(((dof) / 2))),
        sqrt(((dof) / 2)) * (1 - 1 / (8 * ((dof) / 2)) + 1 / (128 * pow(((dof) / 2), 2))
        + 5 / (1024 * pow(((dof) / 2), 3)) - 21 / (32768 * pow(((dof) / 2), 4))))
    / sqrt((dof) * pi())
    * exp(-(((dof) + 1) / 2) * if((pow(abs(t_stat), 2) / (dof)) < 1e-4,
        (pow(abs(t_stat), 2) / (dof))
        - pow((pow(abs(t_stat), 2) / (dof)), 2) / 2
        + pow((pow(abs(t_stat), 2) / (dof)), 3) / 3
        - pow((pow(abs(t_stat), 2) / (dof)), 4) / 4,
        log(1 + (pow(abs(t_stat), 2) / (dof)))))
    * arraySum(arrayMap(l -> exp(l), arrayCumSum(arrayMap(
        (k, b, lw) -> if(k = 0, 0, log(b + k - 1) - log(0.5 + k) + lw),
        range(4000),
        arrayResize([(((dof) + 1) / 2)], 4000, (((dof) + 1) / 2)),
        arrayResize([log(pow(abs(t_stat), 2) / ((dof) + pow(abs(t_stat), 2)))], 4000,
            log(pow(abs(t_stat), 2) / ((dof) + pow(abs(t_stat), 2))))))))))), NULL) AS p_value,
    if(testable,
        least(1, family * sqrt(1 + n_rho2)
            * exp(-pow(raw_diff / se_always_valid, 2) / 2 * n_rho2 / (1 + n_rho2))),
        NULL) AS always_valid_p_value,
    if(testable, raw_diff - se_always_valid * always_valid_factor, NULL) AS always_valid_ci_low,
    if(testable, raw_diff + se_always_valid * always_valid_factor, NULL) AS always_valid_ci_high,
    -- GrowthBook's Bayesian normal approximation with its default (improper) prior.
    if(testable, 0.5 * erfc(-better_sign * raw_diff / se / sqrt(2)), NULL)
        AS chance_to_beat_control,
    -- A guardrail: the always-valid one-sided test that the variant harms (the mixture of
    -- the two-sided test restricted to harmful effects).
    if(testable AND role = 'guardrail',
        least(1, family * sqrt(1 + n_rho2)
            * exp(-pow(raw_diff / se_always_valid, 2) / 2 * n_rho2 / (1 + n_rho2))
            / (2 * 0.5 * erfc(better_sign * raw_diff / se_always_valid
                * sqrt(n_rho2 / (1 + n_rho2))
                / sqrt(2)))),
        NULL) AS always_valid_harm_p_value,
    -- CUPED: the covariate is the same metric in the lookback before exposure, its
    -- coefficient theta pooled over this arm and the control (and, where some visitors
    -- have no history, a second one: below).
    if(cuped_testable, theta, NULL) AS cuped_theta,
    if(cuped_testable, theta_h, NULL) AS cuped_history_theta,
    if(cuped_testable, cuped_raw_diff, NULL) AS cuped_diff,
    if(cuped_testable, cuped_raw_diff - cuped_t_quantile * cuped_se, NULL) AS cuped_ci_low,
    if(cuped_testable, cuped_raw_diff + cuped_t_quantile * cuped_se, NULL) AS cuped_ci_high,
    if(cuped_testable, if(abs(cuped_t_stat) > 40, 0, greatest(0, 1 - 2 * ((abs(cuped_t_stat))
    * if(((cuped_dof) / 2) < 500, exp(lgamma(((cuped_dof) / 2) + 0.5) - lgamma(((cuped_dof) / 2))),
        sqrt(((cuped_dof) / 2)) * (1 - 1 / (8 * ((cuped_dof) / 2)) + 1 / (128 * pow(((cuped_dof) / 2), 2))
        + 5 / (1024 * pow(((cuped_dof) / 2), 3)) - 21 / (32768 * pow(((cuped_dof) / 2), 4))))
    / sqrt((cuped_dof) * pi())
    * exp(-(((cuped_dof) + 1) / 2) * if((pow(abs(cuped_t_stat), 2) / (cuped_dof)) < 1e-4,
        (pow(abs(cuped_t_stat), 2) / (cuped_dof))
        - pow((pow(abs(cuped_t_stat), 2) / (cuped_dof)), 2) / 2
        + pow((pow(abs(cuped_t_stat), 2) / (cuped_dof)), 3) / 3
        - pow((pow(abs(cuped_t_stat), 2) / (cuped_dof)), 4) / 4,
        log(1 + (pow(abs(cuped_t_stat), 2) / (cuped_dof)))))
    * arraySum(arrayMap(l -> exp(l), arrayCumSum(arrayMap(
        (k, b, lw) -> if(k = 0, 0, log(b + k - 1) - log(0.5 + k) + lw),
        range(4000),
        arrayResize([(((cuped_dof) + 1) / 2)], 4000, (((cuped_dof) + 1) / 2)),
        arrayResize([log(pow(abs(cuped_t_stat), 2) / ((cuped_dof) + pow(abs(cuped_t_stat), 2)))], 4000,
            log(pow(abs(cuped_t_stat), 2) / ((cuped_dof) + pow(abs(cuped_t_stat), 2))))))))))), NULL) AS cuped_p_value,
    if(cuped_testable,
        least(1, family * sqrt(1 + n_rho2)
            * exp(-pow(cuped_raw_diff / cuped_se_always_valid, 2) / 2 * n_rho2 / (1 + n_rho2))),
        NULL) AS cuped_always_valid_p_value,
    if(cuped_testable, cuped_raw_diff - cuped_se_always_valid * always_valid_factor, NULL)
        AS cuped_always_valid_ci_low,
    if(cuped_testable, cuped_raw_diff + cuped_se_always_valid * always_valid_factor, NULL)
        AS cuped_always_valid_ci_high,
    if(cuped_testable, 1 - cuped_variance / variance, NULL) AS cuped_variance_reduction,
    cap,
    tuning AS sequential_tuning,
    family AS treatments,
    no_test_reason,
    -- The secondary metrics' p-values corrected for their number (Bonferroni): each
    -- times the experiment's secondary metrics, at most 1. The goal and the guardrails
    -- keep theirs.
    secondary_family AS secondary_metrics,
    if(role = 'secondary', least(1, p_value * secondary_family), p_value) AS adjusted_p_value,
    if(role = 'secondary', least(1, always_valid_p_value * secondary_family),
        always_valid_p_value) AS adjusted_always_valid_p_value,
    refreshed_as_of AS as_of
FROM (
-- Student's t quantile for the intervals.
SELECT *, arrayMap((t, nu) -> t - (((t)
    * if(((nu) / 2) < 500, exp(lgamma(((nu) / 2) + 0.5) - lgamma(((nu) / 2))),
        sqrt(((nu) / 2)) * (1 - 1 / (8 * ((nu) / 2)) + 1 / (128 * pow(((nu) / 2), 2))
        + 5 / (1024 * pow(((nu) / 2), 3)) - 21 / (32768 * pow(((nu) / 2), 4))))
    / sqrt((nu) * pi())
    * exp(-(((nu) + 1) / 2) * if((pow(t, 2) / (nu)) < 1e-4,
        (pow(t, 2) / (nu))
        - pow((pow(t, 2) / (nu)), 2) / 2
        + pow((pow(t, 2) / (nu)), 3) / 3
        - pow((pow(t, 2) / (nu)), 4) / 4,
        log(1 + (pow(t, 2) / (nu)))))
    * arraySum(arrayMap(l -> exp(l), arrayCumSum(arrayMap(
        (k, b, lw) -> if(k = 0, 0, log(b + k - 1) - log(0.5 + k) + lw),
        range(100),
        arrayResize([(((nu) + 1) / 2)], 100, (((nu) + 1) / 2)),
        arrayResize([log(pow(t, 2) / ((nu) + pow(t, 2)))], 100,
            log(pow(t, 2) / ((nu) + pow(t, 2)))))))))
    - 0.475) / (exp(lgamma((nu + 1) / 2) - lgamma(nu / 2)) / sqrt(nu * pi())
    * pow(1 + pow(t, 2) / nu, -(nu + 1) / 2)),
    arrayMap((t, nu) -> t - (((t)
    * if(((nu) / 2) < 500, exp(lgamma(((nu) / 2) + 0.5) - lgamma(((nu) / 2))),
        sqrt(((nu) / 2)) * (1 - 1 / (8 * ((nu) / 2)) + 1 / (128 * pow(((nu) / 2), 2))
        + 5 / (1024 * pow(((nu) / 2), 3)) - 21 / (32768 * pow(((nu) / 2), 4))))
    / sqrt((nu) * pi())
    * exp(-(((nu) + 1) / 2) * if((pow(t, 2) / (nu)) < 1e-4,
        (pow(t, 2) / (nu))
        - pow((pow(t, 2) / (nu)), 2) / 2
        + pow((pow(t, 2) / (nu)), 3) / 3
        - pow((pow(t, 2) / (nu)), 4) / 4,
        log(1 + (pow(t, 2) / (nu)))))
    * arraySum(arrayMap(l -> exp(l), arrayCumSum(arrayMap(
        (k, b, lw) -> if(k = 0, 0, log(b + k - 1) - log(0.5 + k) + lw),
        range(100),
        arrayResize([(((nu) + 1) / 2)], 100, (((nu) + 1) / 2)),
        arrayResize([log(pow(t, 2) / ((nu) + pow(t, 2)))], 100,
            log(pow(t, 2) / ((nu) + pow(t, 2)))))))))
    - 0.475) / (exp(lgamma((nu + 1) / 2) - lgamma(nu / 2)) / sqrt(nu * pi())
    * pow(1 + pow(t, 2) / nu, -(nu + 1) / 2)),
    [1.959963984540054
    + (pow(1.959963984540054, 3) + 1.959963984540054) / (4 * (dof))
    + (5 * pow(1.959963984540054, 5) + 16 * pow(1.959963984540054, 3) + 3 * 1.959963984540054) / (96 * pow(dof, 2))
    ],
    [dof]),
    [dof])[1]
    AS t_quantile, arrayMap((t, nu) -> t - (((t)
    * if(((nu) / 2) < 500, exp(lgamma(((nu) / 2) + 0.5) - lgamma(((nu) / 2))),
        sqrt(((nu) / 2)) * (1 - 1 / (8 * ((nu) / 2)) + 1 / (128 * pow(((nu) / 2), 2))
        + 5 / (1024 * pow(((nu) / 2), 3)) - 21 / (32768 * pow(((nu) / 2), 4))))
    / sqrt((nu) * pi())
    * exp(-(((nu) + 1) / 2) * if((pow(t, 2) / (nu)) < 1e-4,
        (pow(t, 2) / (nu))
        - pow((pow(t, 2) / (nu)), 2) / 2
        + pow((pow(t, 2) / (nu)), 3) / 3
        - pow((pow(t, 2) / (nu)), 4) / 4,
        log(1 + (pow(t, 2) / (nu)))))
    * arraySum(arrayMap(l -> exp(l), arrayCumSum(arrayMap(
        (k, b, lw) -> if(k = 0, 0, log(b + k - 1) - log(0.5 + k) + lw),
        range(100),
        arrayResize([(((nu) + 1) / 2)], 100, (((nu) + 1) / 2)),
        arrayResize([log(pow(t, 2) / ((nu) + pow(t, 2)))], 100,
            log(pow(t, 2) / ((nu) + pow(t, 2)))))))))
    - 0.475) / (exp(lgamma((nu + 1) / 2) - lgamma(nu / 2)) / sqrt(nu * pi())
    * pow(1 + pow(t, 2) / nu, -(nu + 1) / 2)),
    arrayMap((t, nu) -> t - (((t)
    * if(((nu) / 2) < 500, exp(lgamma(((nu) / 2) + 0.5) - lgamma(((nu) / 2))),
        sqrt(((nu) / 2)) * (1 - 1 / (8 * ((nu) / 2)) + 1 / (128 * pow(((nu) / 2), 2))
        + 5 / (1024 * pow(((nu) / 2), 3)) - 21 / (32768 * pow(((nu) / 2), 4))))
    / sqrt((nu) * pi())
    * exp(-(((nu) + 1) / 2) * if((pow(t, 2) / (nu)) < 1e-4,
        (pow(t, 2) / (nu))
        - pow((pow(t, 2) / (nu)), 2) / 2
        + pow((pow(t, 2) / (nu)), 3) / 3
        - pow((pow(t, 2) / (nu)), 4) / 4,
        log(1 + (pow(t, 2) / (nu)))))
    * arraySum(arrayMap(l -> exp(l), arrayCumSum(arrayMap(
        (k, b, lw) -> if(k = 0, 0, log(b + k - 1) - log(0.5 + k) + lw),
        range(100),
        arrayResize([(((nu) + 1) / 2)], 100, (((nu) + 1) / 2)),
        arrayResize([log(pow(t, 2) / ((nu) + pow(t, 2)))], 100,
            log(pow(t, 2) / ((nu) + pow(t, 2)))))))))
    - 0.475) / (exp(lgamma((nu + 1) / 2) - lgamma(nu / 2)) / sqrt(nu * pi())
    * pow(1 + pow(t, 2) / nu, -(nu + 1) / 2)),
    [1.959963984540054
    + (pow(1.959963984540054, 3) + 1.959963984540054) / (4 * (cuped_dof))
    + (5 * pow(1.959963984540054, 5) + 16 * pow(1.959963984540054, 3) + 3 * 1.959963984540054) / (96 * pow(cuped_dof, 2))
    ],
    [cuped_dof]),
    [cuped_dof])[1]
    AS cuped_t_quantile FROM (
    SELECT
        *,
        if(higher_is_better = 1, 1, -1) AS better_sign,
        -- Each arm's mean and the variance of one visitor's value, as gbstats has them:
        -- ProportionStatistic, SampleMeanStatistic, RatioStatistic (delta method).
        sy / n AS mean_y_b,
        sx / n AS mean_x_b,
        sd / n AS mean_d_b,
        if(n > 1, (syy - sy * sy / n) / (n - 1), 0) AS sample_var_y_b,
        if(n > 1, (sdd - sd * sd / n) / (n - 1), 0) AS sample_var_d_b,
        if(n > 1, (syd - sy * sd / n) / (n - 1), 0) AS cov_yd_b,
        if(kind = 'ratio', if(sd != 0, sy / sd, 0), mean_y_b) AS value_b,
        multiIf(kind = 'proportion', mean_y_b * (1 - mean_y_b),
            kind = 'ratio',
                if(mean_d_b = 0 OR n <= 1, 0,
                    sample_var_y_b / pow(mean_d_b, 2)
                    - 2 * cov_yd_b * mean_y_b / pow(mean_d_b, 3)
                    + pow(mean_y_b, 2) * sample_var_d_b / pow(mean_d_b, 4)),
            sample_var_y_b) AS var_b,
        multiIf(kind = 'proportion', mean_x_b * (1 - mean_x_b),
            n > 1, (sxx - sx * sx / n) / (n - 1), 0) AS var_x_b,
        if(n > 1, (sxy - sy * sx / n) / (n - 1), 0) AS cov_xy_b,
        -- The second covariate h (whether the visitor has a history): h * h = h, h * x = x.
        if(n > 1, (sxx - sx * sx / n) / (n - 1), 0) AS sample_var_x_b,
        if(n > 1, (sh - sh * sh / n) / (n - 1), 0) AS var_h_b,
        if(n > 1, (sx - sx * sh / n) / (n - 1), 0) AS cov_xh_b,
        if(n > 1, (shy - sy * sh / n) / (n - 1), 0) AS cov_hy_b,
        -- The variance of the value less theta * x + theta_h * h (CUPED).
        var_b + theta * theta * if(with_history, sample_var_x_b, var_x_b)
            + theta_h * theta_h * var_h_b + 2 * theta * theta_h * cov_xh_b
            - 2 * theta * cov_xy_b - 2 * theta_h * cov_hy_b AS cuped_var_b,
        sy_a / n_a AS mean_y_a,
        sx_a / n_a AS mean_x_a,
        sd_a / n_a AS mean_d_a,
        if(n_a > 1, (syy_a - sy_a * sy_a / n_a) / (n_a - 1), 0) AS sample_var_y_a,
        if(n_a > 1, (sdd_a - sd_a * sd_a / n_a) / (n_a - 1), 0) AS sample_var_d_a,
        if(n_a > 1, (syd_a - sy_a * sd_a / n_a) / (n_a - 1), 0) AS cov_yd_a,
        if(kind = 'ratio', if(sd_a != 0, sy_a / sd_a, 0), mean_y_a) AS value_a,
        multiIf(kind = 'proportion', mean_y_a * (1 - mean_y_a),
            kind = 'ratio',
                if(mean_d_a = 0 OR n_a <= 1, 0,
                    sample_var_y_a / pow(mean_d_a, 2)
                    - 2 * cov_yd_a * mean_y_a / pow(mean_d_a, 3)
                    + pow(mean_y_a, 2) * sample_var_d_a / pow(mean_d_a, 4)),
            sample_var_y_a) AS var_a,
        multiIf(kind = 'proportion', mean_x_a * (1 - mean_x_a),
            n_a > 1, (sxx_a - sx_a * sx_a / n_a) / (n_a - 1), 0) AS var_x_a,
        if(n_a > 1, (sxy_a - sy_a * sx_a / n_a) / (n_a - 1), 0) AS cov_xy_a,
        -- The second covariate h (whether the visitor has a history): h * h = h, h * x = x.
        if(n_a > 1, (sxx_a - sx_a * sx_a / n_a) / (n_a - 1), 0) AS sample_var_x_a,
        if(n_a > 1, (sh_a - sh_a * sh_a / n_a) / (n_a - 1), 0) AS var_h_a,
        if(n_a > 1, (sx_a - sx_a * sh_a / n_a) / (n_a - 1), 0) AS cov_xh_a,
        if(n_a > 1, (shy_a - sy_a * sh_a / n_a) / (n_a - 1), 0) AS cov_hy_a,
        -- The variance of the value less theta * x + theta_h * h (CUPED).
        var_a + theta * theta * if(with_history, sample_var_x_a, var_x_a)
            + theta_h * theta_h * var_h_a + 2 * theta * theta_h * cov_xh_a
            - 2 * theta * cov_xy_a - 2 * theta_h * cov_hy_a AS cuped_var_a,
        value_b AS value,
        value_b - value_a AS raw_diff,
        var_b / n + var_a / n_a AS variance,
        sqrt(variance) AS se,
        -- CUPED (gbstats' RegressionAdjustedStatistic and compute_theta).
        n + n_a AS joint_n,
        multiIf(kind = 'proportion',
                (sy + sy_a) / joint_n * (1 - (sy + sy_a) / joint_n),
            joint_n > 1,
                (syy + syy_a - pow(sy + sy_a, 2) / joint_n) / (joint_n - 1),
            0) AS joint_var_y,
        multiIf(kind = 'proportion',
                (sx + sx_a) / joint_n * (1 - (sx + sx_a) / joint_n),
            joint_n > 1,
                (sxx + sxx_a - pow(sx + sx_a, 2) / joint_n) / (joint_n - 1),
            0) AS joint_var_x,
        if(joint_n > 1,
            (sxy + sxy_a - (sy + sy_a) * (sx + sx_a) / joint_n) / (joint_n - 1), 0)
            AS joint_cov,
        -- Where some visitors have a history and some none, a second covariate h (1 for
        -- a history): the coefficients of x and h by least squares on both arms' visitors
        -- together, and x * theta + h * theta_h the covariate, a sample mean. Where every
        -- visitor has a history, or none, or x tells h, x alone (gbstats).
        greatest(joint_n - 1, 1) AS joint_dof,
        (sxx + sxx_a - pow(sx + sx_a, 2) / joint_n) / joint_dof AS joint_sxx,
        (sh + sh_a - pow(sh + sh_a, 2) / joint_n) / joint_dof AS joint_shh,
        (sx + sx_a - (sx + sx_a) * (sh + sh_a) / joint_n) / joint_dof AS joint_sxh,
        (shy + shy_a - (sh + sh_a) * (sy + sy_a) / joint_n) / joint_dof AS joint_shy,
        joint_sxx * joint_shh - joint_sxh * joint_sxh AS joint_det,
        -- Some have a history and some none: decided on the counts (exact), not on
        -- joint_shh, which rounding may leave above 0 when all have one.
        joint_n > 1 AND joint_var_y > 0 AND sh + sh_a > 0 AND sh + sh_a < joint_n
            AND (joint_sxx = 0 OR joint_det > 1e-9 * joint_sxx * joint_shh) AS with_history,
        multiIf(with_history,
                if(joint_sxx > 0, (joint_shh * joint_cov - joint_sxh * joint_shy) / joint_det, 0),
            joint_var_x > 0 AND joint_var_y > 0, joint_cov / joint_var_x,
            0) AS theta,
        if(with_history,
            if(joint_sxx > 0, (joint_sxx * joint_shy - joint_sxh * joint_cov) / joint_det,
                joint_shy / joint_shh),
            0) AS theta_h,
        (sy - theta * sx - theta_h * sh) / n - (sy_a - theta * sx_a - theta_h * sh_a) / n_a
            AS cuped_raw_diff,
        cuped_var_b / n + cuped_var_a / n_a AS cuped_variance,
        sqrt(greatest(cuped_variance, 0)) AS cuped_se,
        -- The always-valid tests' standard error: the larger of the unpooled one and the
        -- one under no effect, from both arms' values together (a ratio keeps its delta
        -- method's). docs/results.md.
        if(kind = 'ratio', variance, joint_var_y * (1 / n + 1 / n_a)) AS null_variance,
        sqrt(greatest(variance, null_variance)) AS se_always_valid,
        (joint_var_y + theta * theta * if(with_history, joint_sxx, joint_var_x)
            + theta_h * theta_h * joint_shh + 2 * theta * theta_h * joint_sxh
            - 2 * theta * joint_cov - 2 * theta_h * joint_shy) * (1 / n + 1 / n_a)
            AS cuped_null_variance,
        sqrt(greatest(greatest(cuped_variance, cuped_null_variance), 0)) AS cuped_se_always_valid,
        -- Welch-Satterthwaite's degrees of freedom, as gbstats has them.
        pow(variance, 2) / (pow(var_b, 2) / (pow(n, 2) * (n - 1))
            + pow(var_a, 2) / (pow(n_a, 2) * (n_a - 1))) AS dof,
        raw_diff / se AS t_stat,
        pow(cuped_variance, 2) / (pow(cuped_var_b, 2) / (pow(n, 2) * (n - 1))
            + pow(cuped_var_a, 2) / (pow(n_a, 2) * (n_a - 1))) AS cuped_dof,
        cuped_raw_diff / cuped_se AS cuped_t_stat,
        controls = 1 AND n_a > 0 AND variant_id != '__multiple__' AND defined = 1 AS comparable,
        n >= 50 AND n_a >= 50
            AND (kind != 'proportion' OR (sy + sy_a >= 5
                AND n + n_a - sy - sy_a >= 5)) AS enough,
        var_a > 0 AND var_b > 0 AS variances,
        comparable AND is_control = 0 AND enough AND variances AND variance > 0 AS testable,
        testable AND kind != 'ratio' AND cuped_lookback_days > 0 AND cuped_variance > 0
            AS cuped_testable,
        multiIf(controls = 1 AND defined = 0, 'the phase does not define this variant',
            NOT comparable OR is_control = 1, '',
            NOT enough, 'not enough data',
            NOT variances, 'an arm has no variance',
            '') AS no_test_reason,
        -- The always-valid test (gbstats' SequentialTwoSidedTTest) at 5% / treatments.
        greatest(toUInt64(ifNull(phase_treatments, 0)), 1) AS family,
        greatest(toUInt64(ifNull(secondaries, 0)), 1) AS secondary_family,
        5.991464547107982 + 2 * log(family) AS family_bound,
        if(snapshot_tuning > 0, snapshot_tuning,
            if(default_tuning > 0, default_tuning, 5000)) AS tuning,
        arrayElement(arrayFilter((s, start) -> s.1 <= start, tuning_log,
            arrayResize([intDiv(phase_start_ms, 1000)], length(tuning_log),
                intDiv(phase_start_ms, 1000))), -1).2 AS default_tuning,
        (n + n_a) * (family_bound + log(family_bound + 1)) / tuning AS n_rho2,
        sqrt((1 + n_rho2) / n_rho2 * (log(1 + n_rho2) + family_bound)) AS always_valid_factor
    FROM (
      -- The log of the default tuning and the time of the refreshes beside every arm: a
      -- join, not a scalar subquery, which 18.x runs again at each level of the query's
      -- analysis.
      SELECT *
      FROM (
        -- Per metric: its arms in arrays with the control's sums beside, then a row per
        -- arm.
        SELECT
            public_key, experiment_id, phase, metric_id, role, position, kind,
            higher_is_better, cuped_lookback_days, cap, phase_start_ms, controls,
            variant_id, is_control, defined, n, sy, syy, sd, sdd, syd, sx, sxx, sxy, sh, shy,
            n_a, sy_a, syy_a, sd_a, sdd_a, syd_a, sx_a, sxx_a, sxy_a, sh_a, shy_a
        FROM (
            SELECT
                public_key, experiment_id, phase, metric_id,
                any(metric_role) AS role, any(metric_position) AS position,
                any(metric_kind) AS kind, any(higher) AS higher_is_better,
                any(lookback) AS cuped_lookback_days, any(applied_cap) AS cap,
                min(first_ms) AS phase_start_ms,
                countIf(control_flag = 1) AS controls,
                groupArray(variant) AS variant_ids,
                groupArray(control_flag) AS control_flags,
                groupArray(defined) AS defined_flags,
                groupArray(arm_n) AS ns, groupArray(arm_sy) AS sys,
                groupArray(arm_syy) AS syys, groupArray(arm_sd) AS sds,
                groupArray(arm_sdd) AS sdds, groupArray(arm_syd) AS syds,
                groupArray(arm_sx) AS sxs, groupArray(arm_sxx) AS sxxs,
                groupArray(arm_sxy) AS sxys, groupArray(arm_sh) AS shs,
                groupArray(arm_shy) AS shys,
                sumIf(arm_n, control_flag = 1) AS n_a,
                sumIf(arm_sy, control_flag = 1) AS sy_a,
                sumIf(arm_syy, control_flag = 1) AS syy_a,
                sumIf(arm_sd, control_flag = 1) AS sd_a,
                sumIf(arm_sdd, control_flag = 1) AS sdd_a,
                sumIf(arm_syd, control_flag = 1) AS syd_a,
                sumIf(arm_sx, control_flag = 1) AS sx_a,
                sumIf(arm_sxx, control_flag = 1) AS sxx_a,
                sumIf(arm_sxy, control_flag = 1) AS sxy_a,
                sumIf(arm_sh, control_flag = 1) AS sh_a,
                sumIf(arm_shy, control_flag = 1) AS shy_a
            FROM (
                SELECT *, ifNull(defined_control, 0) AS control_flag, ifNull(arm_defined, 0) AS defined
                FROM (
                    -- Each arm's sufficient statistics, on the capped values: the sums
                    -- of parts/metric_arms.sql and those of the values it kept whole, capped.
                    SELECT
                        public_key, experiment_id, phase, metric_id, variant,
                        metric_role, metric_position, metric_kind, higher, lookback,
                        cap_at AS applied_cap, first_ms, arm_n,
                        raw_sy + arraySum(ys_capped) AS arm_sy,
                        raw_syy + arraySum(arrayMap(v -> v * v, ys_capped)) AS arm_syy,
                        raw_sd + arraySum(ds) AS arm_sd,
                        raw_sdd + arraySum(arrayMap(v -> v * v, ds)) AS arm_sdd,
                        raw_syd + arraySum(arrayMap((v, w) -> v * w, ys_capped, ds))
                            AS arm_syd,
                        raw_sx + arraySum(xs_capped) AS arm_sx,
                        raw_sxx + arraySum(arrayMap(v -> v * v, xs_capped)) AS arm_sxx,
                        raw_sxy + arraySum(arrayMap((v, w) -> v * w, xs_capped, ys_capped))
                            AS arm_sxy,
                        raw_sh + arraySum(hs) AS arm_sh,
                        raw_shy + arraySum(arrayMap((v, w) -> v * w, hs, ys_capped)) AS arm_shy
                    FROM (
                        SELECT
                            *,
                            arrayMap((v, c) -> least(v, c), ys, caps) AS ys_capped,
                            arrayMap((v, c) -> least(v, c), xs, caps) AS xs_capped
                        FROM (
                            SELECT
                                public_key, experiment_id, phase, metric_id, segment,
                                variant, metric_role, metric_position, metric_kind, higher,
                                lookback, first_ms, cap_at, arm_n, raw_sy, raw_syy, raw_sd,
                                raw_sdd, raw_syd, raw_sx, raw_sxx, raw_sxy, raw_sh, raw_shy,
                                ys, ds, xs, hs,
                                -- No cap: none applied.
                                if(cap_value > 0 OR by_rank, cap_at, inf) AS applied,
                                arrayResize([applied], length(ys), applied) AS caps
                            FROM (
                                -- The cap at a percentile: of the metric's visitors' values
                                -- in the phase (every arm and segment), numpy's linear.
                                SELECT
                                    public_key, experiment_id, phase, metric_id,
                                    any(m_cap_value) AS cap_value,
                                    any(m_cap_percentile) AS cap_percentile,
                                    cap_value = 0 AND cap_percentile > 0 AS by_rank,
                                    arraySort(groupArrayArray(arm_ys)) AS sorted,
                                    (length(sorted) - 1) * cap_percentile AS rank,
                                    toUInt64(floor(rank)) AS below,
                                    multiIf(cap_value > 0, cap_value,
                                        by_rank AND length(sorted) > 0,
                                            sorted[below + 1] + (rank - below)
                                                * (sorted[least(below + 2, length(sorted))]
                                                    - sorted[below + 1]),
                                        0) AS cap_at,
                                    groupArray(arm_segment) AS segments_of_arms,
                                    groupArray(arm_variant) AS variants,
                                    groupArray(arm_role) AS roles,
                                    groupArray(arm_position) AS positions,
                                    groupArray(arm_kind) AS kinds,
                                    groupArray(arm_higher) AS highers,
                                    groupArray(arm_lookback) AS lookbacks,
                                    groupArray(arm_first_ms) AS firsts,
                                    groupArray(arm_visitors) AS visitor_counts,
                                    groupArray(arm_sy) AS sys, groupArray(arm_syy) AS syys,
                                    groupArray(arm_sd) AS sds, groupArray(arm_sdd) AS sdds,
                                    groupArray(arm_syd) AS syds, groupArray(arm_sx) AS sxs,
                                    groupArray(arm_sxx) AS sxxs, groupArray(arm_sxy) AS sxys,
                                    groupArray(arm_sh) AS shs, groupArray(arm_shy) AS shys,
                                    groupArray(arm_ys) AS arms_ys,
                                    groupArray(arm_ds) AS arms_ds,
                                    groupArray(arm_xs) AS arms_xs,
                                    groupArray(arm_hs) AS arms_hs
                                FROM (
    -- Each arm's sums per metric: its visitors (`arm_visitors`), and the sums of their
    -- values, squares and products (y the value, d the denominator, x the covariate, h
    -- whether the visitor has a history: h * h = h, h * x = x). The values of a capped
    -- metric are kept whole in `arm_ys`, `arm_ds`, `arm_xs` and `arm_hs` instead, until
    -- the cap is known.
    SELECT
        public_key, experiment_id, phase, metric_id, arm_segment, arm_variant,
        toString(role) AS arm_role, position AS arm_position, toString(kind) AS arm_kind,
        higher_is_better AS arm_higher, cuped_lookback_days AS arm_lookback,
        cap_value AS m_cap_value, cap_percentile AS m_cap_percentile,
        arm_first_ms, arm_visitors, arm_sy, arm_syy, arm_sd, arm_sdd, arm_syd, arm_sx,
        arm_sxx, arm_sxy, arm_sh, arm_shy, arm_ys, arm_ds, arm_xs, arm_hs
    FROM (
        SELECT
            public_key, experiment_id, phase, metric_id, arm_segment, arm_variant,
            min(group_first_ms) AS arm_first_ms,
            toFloat64(sum(group_visitors)) AS arm_visitors,
            sum(g_sy) AS arm_sy, sum(g_syy) AS arm_syy, sum(g_sd) AS arm_sd,
            sum(g_sdd) AS arm_sdd, sum(g_syd) AS arm_syd, sum(g_sx) AS arm_sx,
            sum(g_sxx) AS arm_sxx, sum(g_sxy) AS arm_sxy,
            sum(g_sh) AS arm_sh, sum(g_shy) AS arm_shy,
            groupArrayArray(g_ys) AS arm_ys,
            groupArrayArray(g_ds) AS arm_ds,
            groupArrayArray(g_xs) AS arm_xs,
            groupArrayArray(g_hs) AS arm_hs
        FROM (
            -- The visitors of an arm with the same list of stored metrics, summed
            -- together: a sum per metric in arrays.
            SELECT
                public_key, experiment_id, phase, arm_segment, variant_id AS arm_variant,
                stored_ids, count() AS group_visitors, min(first_exposure_ms) AS group_first_ms,
                sumForEach(ys) AS group_sy,
                sumForEach(arrayMap(v -> v * v, ys)) AS group_syy,
                sumForEach(ds) AS group_sd,
                sumForEach(arrayMap(v -> v * v, ds)) AS group_sdd,
                sumForEach(arrayMap((v, w) -> v * w, ys, ds)) AS group_syd,
                sumForEach(xs) AS group_sx,
                sumForEach(arrayMap(v -> v * v, xs)) AS group_sxx,
                sumForEach(arrayMap((v, w) -> v * w, xs, ys)) AS group_sxy,
                sumForEach(hs) AS group_sh,
                sumForEach(arrayMap((v, w) -> v * w, hs, ys)) AS group_shy,
                -- Per metric, the values kept whole.
                groupArrayIfForEach(stored_values, kept) AS group_ys,
                groupArrayIfForEach(stored_denominators, kept) AS group_ds,
                groupArrayIfForEach(stored_pre_values, kept) AS group_xs,
                groupArrayIfForEach(stored_pre_seen, kept) AS group_hs
            FROM (
                -- Which values are kept whole: those of a capped metric. A refresh
                -- stores the metrics sorted by id, as the definitions are listed
                -- here; a visitor stored under other definitions keeps every value
                -- whole, which costs time, not exactness.
                SELECT
                    *,
                    if(stored_ids = defined_ids, defined_kept,
                        arrayMap(i -> toUInt8(1), stored_ids)) AS kept,
                    arrayMap((v, k) -> if(k, 0., v), stored_values, kept) AS ys,
                    arrayMap((v, k) -> if(k, 0., v), stored_denominators, kept) AS ds,
                    arrayMap((v, k) -> if(k, 0., v), stored_pre_values, kept) AS xs,
                    arrayMap((v, k) -> if(k, 0., v), stored_pre_seen, kept) AS hs
                FROM (SELECT *, '' AS arm_segment FROM (-- Each visitor's latest stored refresh per experiment and phase (visitor_metric_values
-- FINAL), its metrics in the arrays `stored_ids`, `stored_values`, `stored_denominators`,
-- `stored_pre_values` and `stored_pre_seen`. `public_key` is cast to `String`, for the joins' same types
-- (18.x: a function of a LowCardinality column is one).
--
-- Read in 4 streams: 18.x merges a FINAL in one stream, and runs all that
-- reads it in that one thread. Each stream merges its own share of the visitors, by a
-- hash of `visitor_id`: a column of the sorting key, so every version of a row is in the
-- same share, and PREWHERE may filter before the merge.
SELECT
    CAST(public_key AS String) AS public_key, experiment_id, phase, visitor_id, variant_id,
    first_exposure_ms, metrics.metric_id AS stored_ids, metrics.value AS stored_values,
    metrics.denominator AS stored_denominators, metrics.pre_value AS stored_pre_values,
    metrics.pre_seen AS stored_pre_seen
FROM analytics.visitor_metric_values FINAL
PREWHERE cityHash64(visitor_id) % 4 = 0
UNION ALL
SELECT
    CAST(public_key AS String) AS public_key, experiment_id, phase, visitor_id, variant_id,
    first_exposure_ms, metrics.metric_id AS stored_ids, metrics.value AS stored_values,
    metrics.denominator AS stored_denominators, metrics.pre_value AS stored_pre_values,
    metrics.pre_seen AS stored_pre_seen
FROM analytics.visitor_metric_values FINAL
PREWHERE cityHash64(visitor_id) % 4 = 1
UNION ALL
SELECT
    CAST(public_key AS String) AS public_key, experiment_id, phase, visitor_id, variant_id,
    first_exposure_ms, metrics.metric_id AS stored_ids, metrics.value AS stored_values,
    metrics.denominator AS stored_denominators, metrics.pre_value AS stored_pre_values,
    metrics.pre_seen AS stored_pre_seen
FROM analytics.visitor_metric_values FINAL
PREWHERE cityHash64(visitor_id) % 4 = 2
UNION ALL
SELECT
    CAST(public_key AS String) AS public_key, experiment_id, phase, visitor_id, variant_id,
    first_exposure_ms, metrics.metric_id AS stored_ids, metrics.value AS stored_values,
    metrics.denominator AS stored_denominators, metrics.pre_value AS stored_pre_values,
    metrics.pre_seen AS stored_pre_seen
FROM analytics.visitor_metric_values FINAL
PREWHERE cityHash64(visitor_id) % 4 = 3) AS stored) AS visitors
                ANY LEFT JOIN (
                    SELECT
                        experiment_id, arrayMap(d -> d.1, defined) AS defined_ids,
                        arrayMap(d -> d.2, defined) AS defined_kept
                    FROM (
                        SELECT
                            experiment_id,
                            arraySort(groupArray((metric_id,
                                toUInt8(cap_value > 0 OR cap_percentile > 0))))
                                AS defined
                        FROM analytics.experiment_metric_definitions
                        GROUP BY experiment_id
                    ) AS listed
                ) AS definitions USING (experiment_id)
            ) AS visitors_split
            GROUP BY public_key, experiment_id, phase, arm_segment, arm_variant,
                stored_ids
        ) AS groups
        ARRAY JOIN
            stored_ids AS metric_id, group_sy AS g_sy, group_syy AS g_syy,
            group_sd AS g_sd, group_sdd AS g_sdd, group_syd AS g_syd,
            group_sx AS g_sx, group_sxx AS g_sxx, group_sxy AS g_sxy,
            group_sh AS g_sh, group_shy AS g_shy,
            group_ys AS g_ys, group_ds AS g_ds, group_xs AS g_xs, group_hs AS g_hs
        GROUP BY public_key, experiment_id, phase, metric_id, arm_segment, arm_variant
    ) AS sums
    -- A metric dropped from the definitions since a visitor's refresh is left out.
    ALL INNER JOIN (
        SELECT
            experiment_id, metric_id, role, position, kind, higher_is_better, cap_value,
            cap_percentile, cuped_lookback_days
        FROM analytics.experiment_metric_definitions
    ) AS definitions USING (experiment_id, metric_id)
) AS arms_summed
                                GROUP BY public_key, experiment_id, phase, metric_id
                            ) AS per_metric
                            ARRAY JOIN
                                segments_of_arms AS segment, variants AS variant,
                                roles AS metric_role, positions AS metric_position,
                                kinds AS metric_kind, highers AS higher,
                                lookbacks AS lookback, firsts AS first_ms,
                                visitor_counts AS arm_n, sys AS raw_sy, syys AS raw_syy,
                                sds AS raw_sd, sdds AS raw_sdd, syds AS raw_syd,
                                sxs AS raw_sx, sxxs AS raw_sxx, sxys AS raw_sxy,
                                shs AS raw_sh, shys AS raw_shy,
                                arms_ys AS ys, arms_ds AS ds, arms_xs AS xs, arms_hs AS hs
                        ) AS with_caps
                    ) AS capped
                ) AS arms
                ANY LEFT JOIN (
                    SELECT experiment_id, phase, variant_id AS variant,
                        is_control AS defined_control, toUInt8(1) AS arm_defined
                    FROM analytics.experiment_phase_variants
                ) AS definitions USING (experiment_id, phase, variant)
            ) AS defined_arms
            GROUP BY public_key, experiment_id, phase, metric_id
        ) AS per_metric
        ARRAY JOIN
            variant_ids AS variant_id, control_flags AS is_control,
            defined_flags AS defined, ns AS n, sys AS sy,
            syys AS syy, sds AS sd, sdds AS sdd, syds AS syd, sxs AS sx, sxxs AS sxx,
            sxys AS sxy, shs AS sh, shys AS shy
      ) AS arms_of_metrics
      CROSS JOIN (
        SELECT tuning_log, refreshed_as_of
        FROM (
            SELECT
                arraySort(groupArray((toInt64(toUnixTimestamp(set_at)), value))) AS tuning_log
            FROM analytics.results_settings_log
            WHERE name = 'sequential_tuning' AND value > 0 AND isFinite(value)
        ) AS tunings_logged
        CROSS JOIN (
    SELECT toDateTime(if(countIf(alive) > 0, minIf(mark, alive), max(mark)), 'UTC')
        AS refreshed_as_of
    FROM (
        SELECT consumer, max(as_of) AS mark,
            max(written_at) >= now() - 120 AS alive
        FROM analytics.metric_refresh_marks
        GROUP BY consumer
    ) AS consumers) AS refreshed
      ) AS logged
      -- One block: the aggregations above hand on up to 256, and the statistics cost
      -- per block.
      ORDER BY public_key, experiment_id, phase, metric_id, variant_id
    ) AS arms
    ANY LEFT JOIN (
        SELECT experiment_id, phase, phase_treatments, snapshot_tuning, secondaries
        FROM (
            SELECT experiment_id, phase, phase_treatments, snapshot_tuning
            FROM (
                SELECT experiment_id, phase, countIf(is_control = 0) AS phase_treatments
                FROM analytics.experiment_phase_variants
                WHERE weight > 0
                GROUP BY experiment_id, phase
            ) AS weighted
            ANY LEFT JOIN (
                SELECT experiment_id, phase, sequential_tuning AS snapshot_tuning
                FROM analytics.experiment_phase_settings
            ) AS tunings USING (experiment_id, phase)
        ) AS phases
        ANY LEFT JOIN (
            SELECT experiment_id, countIf(role = 'secondary') AS secondaries
            FROM analytics.experiment_metric_definitions
            GROUP BY experiment_id
        ) AS roles USING (experiment_id)
    ) AS settings USING (experiment_id, phase)
) AS statistics
) AS quantiles;

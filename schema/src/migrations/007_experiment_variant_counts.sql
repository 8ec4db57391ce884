CREATE VIEW IF NOT EXISTS {db}.experiment_variant_counts{on_cluster} AS
SELECT
    public_key, experiment_id, phase, variant_id, exposed, converted,
    is_control, weight, defined
FROM (
    SELECT
        public_key, experiment_id, phase, variant_id,
        count() AS exposed,
        countIf(converted) AS converted
    FROM {db}.experiment_visitor_exposures
    GROUP BY public_key, experiment_id, phase, variant_id
) AS counts
ANY LEFT JOIN (
    SELECT experiment_id, phase, variant_id, is_control, weight, toUInt8(1) AS defined
    FROM {db}.experiment_phase_variants
) AS definitions USING (experiment_id, phase, variant_id)

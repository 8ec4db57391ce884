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
        FROM {db}.experiment_visitor_exposures
    ) AS visitors
    GROUP BY public_key, experiment_id, phase, variant_id
) AS counts
ANY LEFT JOIN (
    SELECT experiment_id, phase, variant_id, is_control, weight, toUInt8(1) AS defined
    FROM {db}.experiment_phase_variants
) AS definitions USING (experiment_id, phase, variant_id)

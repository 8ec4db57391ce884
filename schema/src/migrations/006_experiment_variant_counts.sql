CREATE VIEW IF NOT EXISTS {db}.experiment_variant_counts{on_cluster} AS
SELECT
    public_key, experiment_id, variant_id, exposed, converted,
    is_control, weight, defined
FROM (
    SELECT
        public_key,
        experiment_id,
        if(n_variants > 1, '__multiple__', v0) AS variant_id,
        count() AS exposed,
        countIf(tc >= t0) AS converted
    FROM (
        SELECT
            toString(public_key) AS public_key,
            toString(experiment_id) AS experiment_id,
            session_id,
            uniqExactIfMerge(variants) AS n_variants,
            argMinIfMerge(first_variant) AS v0,
            minIfMerge(first_exposure) AS t0,
            maxIfMerge(last_conversion) AS tc,
            maxMerge(tested) AS any_test
        FROM {db}.experiment_sessions
        GROUP BY public_key, experiment_id, session_id
    )
    WHERE n_variants > 0 AND any_test = 0
    GROUP BY public_key, experiment_id, variant_id
) AS counts
ANY LEFT JOIN (
    SELECT experiment_id, variant_id, is_control, weight, toUInt8(1) AS defined
    FROM {db}.experiment_variants_current
) AS definitions USING (experiment_id, variant_id)

SELECT experiment_id, variant_id, version, weight, is_control, status, start_at, end_at, parts
FROM {db}.experiment_variants FINAL
WHERE (experiment_id, version) IN (
    SELECT experiment_id, argMax(version, loaded_at)
    FROM {db}.experiment_variants FINAL
    GROUP BY experiment_id
)

SELECT experiment_id, phase, variant_id, weight, is_control
FROM {db}.experiment_variants FINAL
WHERE (experiment_id, phase, version) IN (
    SELECT experiment_id, phase, argMax(version, loaded_at)
    FROM {db}.experiment_variants FINAL
    GROUP BY experiment_id, phase
)

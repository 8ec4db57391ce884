SELECT
    public_key, experiment_id, phase, {time_columns}variant_id, is_control, exposed, converted,
    arm_rate AS conversion_rate,
    {head},
    {srm_p_value} AS srm_p_value,
    {tail},
    mature_exposed AS mature_visitors,
    mature_converted,
    if(mature_exposed > 0, mature_arm_rate, NULL) AS mature_conversion_rate,
    {mature_head},
    {mature_tail},
    tuning AS sequential_tuning,
    family AS treatments,
    {lift},
    {as_of} AS as_of
FROM (
    SELECT
        *,
        {derived},
        {mature_derived},
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
            FROM {db}.results_settings_log
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
            public_key, experiment_id, phase{by}, variant_id, is_control, defined, exposed, converted,
            mature_exposed, mature_converted, controls, control_exposed, control_converted,
            mature_control_exposed, mature_control_converted, srm_n, srm_sum, phase_start_ms
        FROM (
            SELECT
                public_key, experiment_id, phase{by},
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
            FROM {db}.{counts}
            GROUP BY public_key, experiment_id, phase{by}
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
            FROM {db}.experiment_phase_variants
            WHERE weight > 0
            GROUP BY experiment_id, phase
        ) AS weighted
        ANY LEFT JOIN (
            SELECT experiment_id, phase, sequential_tuning AS snapshot_tuning
            FROM {db}.experiment_phase_settings
        ) AS tunings USING (experiment_id, phase)
    ) AS weights USING (experiment_id, phase)
) AS statistics
{srm_join}

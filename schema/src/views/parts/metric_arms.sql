(
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
                FROM {visitor_rows} AS visitors
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
                        FROM {db}.experiment_metric_definitions
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
        FROM {db}.experiment_metric_definitions
    ) AS definitions USING (experiment_id, metric_id)
)

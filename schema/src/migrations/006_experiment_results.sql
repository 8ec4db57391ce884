CREATE VIEW IF NOT EXISTS {db}.experiment_results{on_cluster} AS
SELECT
    public_key, experiment_id, variant_id, is_control, exposed, converted, conversion_rate,
    if(comparable, if(is_control = 1, 0, raw_diff), NULL) AS diff,
    if(comparable, if(is_control = 1, 0, raw_diff - 1.959963984540054 * se), NULL) AS ci_low,
    if(comparable, if(is_control = 1, 0, raw_diff + 1.959963984540054 * se), NULL) AS ci_high,
    if(comparable AND is_control = 0 AND se > 0, erfc(abs(raw_diff / se) / sqrt(2)), NULL)
        AS p_value,
    {srm_chi_square} AS srm_p_value
FROM (
    SELECT
        *,
        converted / exposed AS conversion_rate,
        control_converted / control_exposed AS control_rate,
        conversion_rate - control_rate AS raw_diff,
        sqrt(conversion_rate * (1 - conversion_rate) / exposed
            + control_rate * (1 - control_rate) / control_exposed) AS se,
        controls = 1 AND control_exposed > 0 AND variant_id != '__multiple__' AS comparable,
        srm_k - 1 AS srm_df,
        greatest(srm_w / srm_n * srm_sum - srm_n, 0) AS srm_x
    FROM (
        SELECT *
        FROM {db}.experiment_variant_counts
        ANY LEFT JOIN (
            SELECT
                public_key,
                experiment_id,
                countIf(is_control = 1) AS controls,
                sumIf(exposed, is_control = 1) AS control_exposed,
                sumIf(converted, is_control = 1) AS control_converted,
                sumIf(exposed, weight > 0) AS srm_n,
                sumIf(exposed * exposed / weight, weight > 0) AS srm_sum
            FROM {db}.experiment_variant_counts
            GROUP BY public_key, experiment_id
        ) AS per_experiment USING (public_key, experiment_id)
    ) AS counts
    ANY LEFT JOIN (
        SELECT experiment_id, sum(weight) AS srm_w, count() AS srm_k
        FROM {db}.experiment_variants_current
        WHERE weight > 0
        GROUP BY experiment_id
    ) AS weights USING (experiment_id)
)

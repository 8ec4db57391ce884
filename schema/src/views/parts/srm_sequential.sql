ANY LEFT JOIN (
    -- The sample-ratio check under hourly looks: a Dirichlet-multinomial Bayes factor of
    -- the exposed counts against the weights (Lindon & Malek, 2022; prior concentration
    -- {srm_prior} centred on the weights), its p-value 1 / the largest factor so far.
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
                    lgamma({srm_prior}) - lgamma({srm_prior} + sum(exposed))
                        + sum(lgamma(prior + exposed) - lgamma(prior)
                            - exposed * log(weight / total_weight)) AS log_factor
                FROM (
                    SELECT
                        public_key, experiment_id, phase, hour, exposed, weight, total_weight,
                        {srm_prior} * weight / total_weight AS prior
                    FROM {db}.experiment_variant_counts_over_time
                    ANY LEFT JOIN (
                        SELECT experiment_id, phase, sum(weight) AS total_weight
                        FROM {db}.experiment_phase_variants
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
) AS srm_sequential USING (public_key, experiment_id, phase, hour)

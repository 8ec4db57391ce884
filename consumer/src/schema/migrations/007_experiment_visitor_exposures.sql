CREATE VIEW IF NOT EXISTS {db}.experiment_visitor_exposures{on_cluster} AS
SELECT
    public_key, experiment_id, visitor_id,
    tupleElement(exposure, 1) AS phase,
    if(tupleElement(exposure, 2) > 1, '__multiple__', tupleElement(exposure, 3)) AS variant_id,
    tupleElement(exposure, 4) AS first_exposure,
    last_conversion >= first_exposure AS converted,
    tupleElement(exposure, 5) AS max_time_on_page
FROM (
    SELECT
        public_key, experiment_id, visitor_id,
        max(phase_conversion) AS last_conversion,
        max(phase_excluded) AS excluded,
        groupArrayIf((phase, n_variants, first_variant, first_time, time_on_page),
            n_variants > 0) AS exposures
    FROM (
        SELECT
            toString(public_key) AS public_key,
            toString(experiment_id) AS experiment_id,
            visitor_id,
            phase,
            uniqExactIfMerge(variants) AS n_variants,
            argMinIfMerge(first_variant) AS first_variant,
            minIfMerge(first_exposure) AS first_time,
            maxIfMerge(last_conversion) AS phase_conversion,
            maxMerge(excluded) AS phase_excluded,
            if(maxMerge(has_time_on_page) = 1, toNullable(maxIfMerge(max_time_on_page)), NULL)
                AS time_on_page
        FROM {db}.experiment_visitors
        GROUP BY public_key, experiment_id, visitor_id, phase
    )
    GROUP BY public_key, experiment_id, visitor_id
)
ARRAY JOIN exposures AS exposure
WHERE excluded = 0

CREATE VIEW IF NOT EXISTS {db}.experiment_visitor_exposures{on_cluster} AS
SELECT
    public_key, experiment_id, phase, visitor_id,
    if(n > 1, '__multiple__', v0) AS variant_id,
    t0 AS first_exposure,
    tc >= t0 AS converted,
    top AS max_time_on_page
FROM (
    SELECT
        toString(public_key) AS public_key,
        toString(experiment_id) AS experiment_id,
        phase,
        visitor_id,
        uniqExactIfMerge(variants) AS n,
        argMinIfMerge(first_variant) AS v0,
        minIfMerge(first_exposure) AS t0,
        maxIfMerge(last_conversion) AS tc,
        maxMerge(excluded) AS out,
        if(maxMerge(has_time_on_page) = 1, toNullable(maxIfMerge(max_time_on_page)), NULL)
            AS top
    FROM {db}.experiment_visitors
    GROUP BY public_key, experiment_id, phase, visitor_id
)
WHERE n > 0 AND out = 0

SELECT
    public_key,
    experiment_id,
    session_id,
    uniqExactIfState(toString(variant_id), event_name = 'impression' AND variant_id != '')
        AS variants,
    argMinIfState(toString(variant_id), event_time,
        event_name = 'impression' AND variant_id != '') AS first_variant,
    minIfState(event_time, event_name = 'impression' AND variant_id != '') AS first_exposure,
    maxIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS last_conversion,
    maxState(test) AS tested,
    maxIfState(ifNull(time_on_page, 0), isNotNull(time_on_page)) AS max_time_on_page,
    maxState(toUInt8(isNotNull(time_on_page))) AS has_time_on_page
FROM {db}.events{local}
GROUP BY public_key, experiment_id, session_id

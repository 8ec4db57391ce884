-- One row per visitor with stored metric values (visitor_metric_values), by
-- `visitor_key` (a hash of the public key and the visitor id): their latest refresh, the
-- rows of `events` it read (`events_seen`) and those there are now (`events`,
-- visitor_event_counts), and `fresh`: 1 when the two are equal and the metric definitions
-- and phase settings of every row of that refresh are still the current ones. Two
-- visitors of one key read as stale (their counts add up), so their values are computed
-- from the events.
-- A fixed-size key: grouping, joining and testing it costs a fraction of what the two
-- strings cost, at millions of visitors.
SELECT
    visitor_key, intDiv(top_mark, 2) AS latest_refresh, events_seen, events,
    toUInt8(top_mark % 2 = 0 AND events = events_seen) AS fresh
FROM (
    -- A stored row's mark: its refresh doubled, plus 1 when its settings changed since
    -- (0 for a count's row). The largest is the latest refresh's, odd when any row of it
    -- is not current. One pass over both tables, rather than a join of their groups.
    SELECT
        visitor_key, max(mark) AS top_mark, argMax(seen, mark) AS events_seen,
        sum(counted) AS events
    FROM (
        SELECT
            {visitor_key} AS visitor_key, events_seen AS seen,
            refresh_id * 2 + toUInt64((experiment_id, phase, settings_hash) GLOBAL NOT IN (
                SELECT experiment_id, phase, current_settings_hash
                FROM ({current_settings}) AS current
            )) AS mark,
            toUInt64(0) AS counted
        FROM {db}.visitor_metric_values
        UNION ALL
        SELECT
            {visitor_key} AS visitor_key, toUInt64(0) AS seen, toUInt64(0) AS mark,
            events AS counted
        FROM {db}.visitor_event_counts
    ) AS rows
    GROUP BY visitor_key
) AS visitors
WHERE top_mark > 0

SELECT
    experiment_id, phase, conversion_window_hours, sequential_tuning,
    -- 0: the phase has not ended (no later phase loaded, no endAt). `phase` goes into the
    -- lambda as an array: 18.x does not see a column that only a lambda reads, and
    -- `SELECT phase_end_ms` alone then failed.
    arrayReduce('min', arrayFilter(t -> t > 0, [
        arrayReduce('min', arrayFilter((t, q, p) -> q > p, phase_starts, phases,
            arrayResize([phase], length(phases), phase))),
        end_at_ms])) AS phase_end_ms
FROM (
    SELECT
        experiment_id, phase,
        -- The window of the phase's current definition; the tuning of its first that
        -- sets one (a later change within the phase is not taken: start a new phase).
        argMax(conversion_window_hours, loaded) AS conversion_window_hours,
        argMinIf(sequential_tuning, loaded, sequential_tuning > 0) AS sequential_tuning,
        argMax(end_at_ms, loaded) AS end_at_ms
    FROM (
        SELECT
            experiment_id, phase, conversion_window_hours, sequential_tuning,
            {to_ms}(loaded_at) AS loaded,
            ifNull(toInt64(toUnixTimestamp(end_at)) * 1000, toInt64(0)) AS end_at_ms
        FROM {db}.experiment_variants FINAL
    ) AS definitions
    GROUP BY experiment_id, phase
) AS phases
ANY LEFT JOIN (
    -- A phase ends when a later one is first loaded.
    SELECT experiment_id, groupArray(phase) AS phases, groupArray(started) AS phase_starts
    FROM (
        SELECT experiment_id, phase, min({to_ms}(loaded_at)) AS started
        FROM {db}.experiment_variants FINAL
        GROUP BY experiment_id, phase
    ) AS first_loads
    GROUP BY experiment_id
) AS later_phases USING (experiment_id)

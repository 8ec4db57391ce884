multiIf({agg} IN ('any', 'count', 'sum'), if({agg} = 'any', toFloat64({x}_sum > 0), {x}_sum),
        {agg} = 'max', {x}_max,
        {agg} = 'mean', if({x}_values > 0, {x}_sum / {x}_values, 0),
        {agg} = 'sessions', {x}_sessions,
        0)

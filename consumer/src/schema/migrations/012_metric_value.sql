multiIf({agg} = 'any', toFloat64({x}_count > 0),
        {agg} = 'count', toFloat64({x}_count),
        {agg} = 'sum', {x}_sum,
        {agg} = 'max', {x}_max,
        {agg} = 'mean', if({x}_values > 0, {x}_sum / {x}_values, 0),
        {agg} = 'sessions', toFloat64({x}_sessions),
        0)

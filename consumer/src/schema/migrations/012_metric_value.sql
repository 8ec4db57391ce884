multiIf({agg} = 'any', toFloat64(sum({x}_count) > 0),
        {agg} = 'count', toFloat64(sum({x}_count)),
        {agg} = 'sum', sum({x}_sum),
        {agg} = 'max', max({x}_max),
        {agg} = 'mean', if(sum({x}_values) > 0, sum({x}_sum) / sum({x}_values), 0),
        {agg} = 'sessions', toFloat64(countIf({x}_count > 0)),
        0)

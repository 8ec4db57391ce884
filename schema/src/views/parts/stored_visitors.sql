-- Each visitor's latest stored refresh per experiment and phase (visitor_metric_values
-- FINAL), its metrics in the arrays `stored_ids`, `stored_values`, `stored_denominators`,
-- `stored_pre_values` and `stored_pre_seen`. `public_key` is cast to `String`, for the joins' same types
-- (18.x: a function of a LowCardinality column is one).
--
-- Read in {final_streams} streams: 18.x merges a FINAL in one stream, and runs all that
-- reads it in that one thread. Each stream merges its own share of the visitors, by a
-- hash of `visitor_id`: a column of the sorting key, so every version of a row is in the
-- same share, and PREWHERE may filter before the merge.
{final_streams_union}

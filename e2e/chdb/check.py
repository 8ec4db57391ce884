"""Runs the consumer's schema statements through chdb (ClickHouse 26.x in-process), so a
statement a modern server refuses fails here. Input: a JSON file of
{"layout": "single" | "cluster", "statements": [{"runs", "sql", "settings", "parse_only"?}]},
argument 1 (a statement with "parse_only": true is only parsed, with EXPLAIN AST),
and the configuration file of chdb's server (macros, the `analytics` cluster, an in-memory
Keeper), argument 2.

Two things of a cluster cannot run in chdb, which has no server threads:
- distributed DDL: a cluster-wide statement's whole text is parsed (EXPLAIN AST), then it
  is run without `ON CLUSTER <name>`, which is what each server of the cluster runs;
- replication: a Replicated table stays read-only. Once its CREATE has run (so its engine
  definition is checked), it is made again with the same definition and the plain engine,
  so that the statements after it (ALTERs, materialized views, inserts) are checked too.
Prints one line per statement; exits 1 on the first refusal. In the single-server layout,
it then writes three events, two variants and two metrics and reads the results views, one line
each (`view NAME: N rows`), so that a view modern ClickHouse creates but cannot answer
fails too, and each view's columns (`columns NAME: [[name, type], ...]`).
"""

import json
import os
import re
import sys
import tempfile

from chdb import session

ON_CLUSTER = re.compile(r" ON CLUSTER \w+")
REPLICATED = re.compile(r"Replicated(\w*MergeTree)\('[^']*', '[^']*'\)")
CREATED = re.compile(r"CREATE TABLE IF NOT EXISTS (\S+)")


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        plan = json.load(f)
    folder = tempfile.mkdtemp(prefix="chdb-schema-")
    db = session.Session(f"{folder}?config-file={sys.argv[2]}")
    # chdb turns a bare expression into a SELECT; a server does not.
    db.query("SET implicit_select = 0")
    for number, statement in enumerate(plan["statements"], 1):
        sql = statement["sql"]
        try:
            for name, value in statement["settings"]:
                db.query(f"SET {name} = {value}")
            if statement.get("parse_only"):
                # Access control: chdb has no writeable user storage; the text is parsed.
                db.query(f"EXPLAIN AST {sql}")
                print(f"ok {plan['layout']} #{number} (parsed): {' '.join(sql.split())[:90]}")
                continue
            if ON_CLUSTER.search(sql):
                db.query(f"EXPLAIN AST {sql}")
                sql = ON_CLUSTER.sub("", sql)
            db.query(sql)
            if REPLICATED.search(sql):
                db.query(f"DROP TABLE {CREATED.search(sql).group(1)}")
                db.query(REPLICATED.sub(r"\1()", sql))
        except Exception as error:  # chdb raises its own RuntimeError subclasses
            print(f"REFUSED {plan['layout']} #{number}: {sql}\n{error}", flush=True)
            return 1
        print(f"ok {plan['layout']} #{number} ({statement['runs']}): {' '.join(sql.split())[:90]}")
    if plan["layout"] == "single":
        return read_views(db, plan.get("refresh", []))
    return 0


EVENTS = """INSERT INTO analytics.events (event_id, received_at, public_key, event_name,
    experiment_id, variant_id, session_id, visitor_id, phase, event_time) VALUES
    (generateUUIDv4(), '2026-11-01 10:20:00', 'pk', 'impression', 'exp', 'a', 's1', 'v1', 1,
     toDateTime64('2026-11-01 10:15:00.250', 3, 'UTC')),
    (generateUUIDv4(), '2026-11-01 11:20:00', 'pk', 'impression', 'exp', 'b', 's2', 'v2', 1,
     toDateTime64('2026-11-01 11:15:00.250', 3, 'UTC')),
    (generateUUIDv4(), '2026-11-01 11:30:00', 'pk', 'conversion', 'exp', 'b', 's2', 'v2', 1,
     toDateTime64('2026-11-01 11:25:00', 3, 'UTC'))"""
DEFINITIONS = """INSERT INTO analytics.experiment_variants (experiment_id, variant_id, version,
    weight, is_control, status, parts, loaded_at, phase) VALUES
    ('exp', 'a', 'v', 50, 1, 'live', '{}', now64(3), 1),
    ('exp', 'b', 'v', 50, 0, 'live', '{}', now64(3), 1)"""
METRICS = """INSERT INTO analytics.experiment_metrics (experiment_id, version, phase, metric_id,
    role, position, kind, num_event, num_conversion, num_aggregate, num_field, den_event,
    den_aggregate, cap_percentile, cuped_lookback_days, loaded_at) VALUES
    ('exp', 'v', 1, 'conversion', 'goal', 0, 'proportion', '', 1, 'any', '', '', '', 0, 14,
     '2026-11-01 09:00:00.000'),
    ('exp', 'v', 1, 'clicks_per_session', 'secondary', 1, 'ratio', 'click', 0, 'count', '', '',
     'sessions', 0.9, 14, '2026-11-01 09:00:00.000')"""
VIEWS = ["experiment_results", "experiment_variant_counts_over_time", "experiment_results_over_time",
         "experiment_metric_results"]


def read_views(db, refresh) -> int:
    """Stores rows, then the metric values as the consumer's refresh does (`refresh`, its
    statements over every visitor), then reads the views."""
    try:
        db.query(EVENTS)
        db.query(DEFINITIONS)
        db.query(METRICS)
        for sql in refresh:
            db.query(sql)
        for view in VIEWS:
            rows = str(db.query(f"SELECT * FROM analytics.{view}", "TSV")).strip().splitlines()
            print(f"view {view}: {len(rows)} rows")
            print("\n".join(rows))
            described = str(db.query(f"DESCRIBE TABLE analytics.{view}", "TSVRaw")).splitlines()
            columns = [line.split("\t")[:2] for line in described if line]
            print(f"columns {view}: {json.dumps(columns)}")
    except Exception as error:  # chdb raises its own RuntimeError subclasses
        print(f"REFUSED reading the views: {error}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # chdb's teardown can abort the process after a failed query; the verdict is made.
    os._exit(code)

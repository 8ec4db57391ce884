//! The render mechanism: what the topology (one server or a cluster) changes in each
//! migration step ([`Layout`], `Step::render`), and every statement of a fresh migration.

use crate::caps::ServerCaps;
use crate::layout::{Layout, Target};
use crate::migrations::{BOOTSTRAP, MIGRATIONS, Step};
use crate::views;

impl Step {
    /// The statements of this step for a server of version `caps` and `layout`.
    pub(crate) fn render(
        &self,
        layout: &Layout,
        caps: ServerCaps,
        database: &str,
    ) -> Vec<(Target, String)> {
        self.templates(layout)
            .into_iter()
            .map(|(target, sql)| (target, caps.render(&sql, database, layout)))
            .collect()
    }

    pub(crate) fn templates(&self, layout: &Layout) -> Vec<(Target, String)> {
        match self {
            Step::Sharded {
                name,
                engine,
                create,
                ..
            } if layout.whole => Step::Whole {
                name,
                engine,
                create,
            }
            .templates(layout),
            Step::Sharded {
                name,
                engine,
                create,
                key,
            } => {
                let local = create
                    .replace("{table}", &format!("{{db}}.{name}{{local}}"))
                    .replace("{engine}", &layout.engine(engine, name, "{shard}"));
                let mut statements = vec![(layout.create_target(), local)];
                if let Some(cluster) = &layout.cluster {
                    statements.push((
                        Target::Once,
                        format!(
                            "CREATE TABLE IF NOT EXISTS {{db}}.{name}{{on_cluster}} \
                             AS {{db}}.{name}{{local}}\n\
                             ENGINE = Distributed({cluster}, {{db}}, {name}{{local}}, {key})"
                        ),
                    ));
                }
                statements
            }
            Step::Whole {
                name,
                engine,
                create,
            } => vec![(
                layout.create_target(),
                create
                    .replace("{table}", &format!("{{db}}.{name}"))
                    .replace("{engine}", &layout.engine(engine, name, "all")),
            )],
            Step::Reshard { .. } if layout.whole => Vec::new(),
            Step::Reshard { name, key } => match &layout.cluster {
                Some(cluster) => vec![
                    (
                        Target::EachServer,
                        format!("DROP TABLE IF EXISTS {{db}}.{name}"),
                    ),
                    (
                        Target::EachServer,
                        format!(
                            "CREATE TABLE IF NOT EXISTS {{db}}.{name} AS {{db}}.{name}{{local}} \
                             ENGINE = Distributed({cluster}, {{db}}, {name}{{local}}, {key})"
                        ),
                    ),
                ],
                None => Vec::new(),
            },
            Step::Once(sql) => vec![(Target::Once, (*sql).to_owned())],
            Step::EachServer(sql) if layout.cluster.is_some() && !layout.whole => {
                vec![(Target::EachServer, (*sql).to_owned())]
            }
            Step::EachServer(_) => Vec::new(),
            Step::EachShard(sql) if layout.whole => vec![(Target::Once, (*sql).to_owned())],
            Step::EachShard(sql) => vec![(Target::EachShard, (*sql).to_owned())],
        }
    }
}

/// One statement of the schema as it runs against a given server.
#[derive(Debug, serde::Serialize)]
pub struct Statement {
    /// `once`, `each_server` or `each_shard`.
    pub runs: &'static str,
    pub sql: String,
    /// Settings sent with it.
    pub settings: Vec<(&'static str, &'static str)>,
}

/// Every statement of the schema, bootstrap and migrations in order, as the consumer
/// would send them to a server of version `caps`, on one server (`cluster` `None`) or
/// across the named cluster: for checking them against servers that cannot run here.
pub fn statements(caps: ServerCaps, cluster: Option<&str>, database: &str) -> Vec<Statement> {
    statements_of(&Layout::new(cluster), caps, database)
}

fn statements_of(layout: &Layout, caps: ServerCaps, database: &str) -> Vec<Statement> {
    let views = views::VIEWS
        .iter()
        .map(|view| (Target::Once, view.create(caps, database, layout)));
    BOOTSTRAP
        .iter()
        .chain(MIGRATIONS.iter().flat_map(|m| m.steps))
        .flat_map(|step| step.render(layout, caps, database))
        .chain(views)
        .map(|(target, sql)| Statement {
            runs: match target {
                Target::Once => "once",
                Target::EachServer => "each_server",
                Target::EachShard => "each_shard",
            },
            sql,
            settings: caps.low_cardinality_setting().into_iter().collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topology_decides_engines_names_and_where_statements_run() {
        let old = ServerCaps::parse("18.16.1").expect("parses");
        let single = statements(old, None, "analytics");
        let events = &single[2].sql;
        assert!(
            events.contains("CREATE TABLE IF NOT EXISTS analytics.events ("),
            "{events}"
        );
        assert!(events.contains("ENGINE = ReplacingMergeTree()"), "{events}");
        assert!(
            single
                .iter()
                .all(|s| s.runs != "each_server" && !s.sql.contains("CLUSTER"))
        );
        assert!(
            single.iter().all(|s| !s.settings.is_empty()),
            "18.x gets its setting"
        );

        let cluster = statements(old, Some("analytics"), "analytics");
        let sql: Vec<&str> = cluster.iter().map(|s| s.sql.as_str()).collect();
        assert!(
            sql[2].contains("analytics.events_local (\n    event_id"),
            "{}",
            sql[2]
        );
        // A replicated table is made on each server in turn: ON CLUSTER makes its
        // replicas race, which can leave a server's DDL worker stuck on 18.16.
        let replicated: Vec<&Statement> = cluster
            .iter()
            .filter(|s| s.sql.contains("ENGINE = Replicated"))
            .collect();
        assert!(replicated.len() >= 8, "{}", replicated.len());
        assert!(
            replicated
                .iter()
                .all(|s| s.runs == "each_server" && !s.sql.contains("ON CLUSTER")),
            "{replicated:#?}"
        );
        // So is every ALTER (of a replicated table through one replica per shard or of
        // the whole one, of a Distributed one on each server): ON CLUSTER has stopped a
        // server's DDL worker for good.
        let alters: Vec<&Statement> = cluster
            .iter()
            .filter(|s| s.sql.starts_with("ALTER"))
            .collect();
        assert!(alters.len() >= 10, "{}", alters.len());
        assert!(
            alters.iter().all(|s| !s.sql.contains("ON CLUSTER")),
            "{alters:#?}"
        );
        assert!(sql[2].contains(
            "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/analytics/events', '{replica}')"
        ));
        assert!(
            sql[3].contains(
                "ENGINE = Distributed(analytics, analytics, events_local, sipHash64(session_id))"
            ),
            "{}",
            sql[3]
        );
        assert!(sql.iter().any(|s| s.contains(
            "ReplicatedReplacingMergeTree('/clickhouse/tables/all/analytics/experiment_variants', '{replica}')"
        )));
        // The replicated tables are made and the Distributed table altered on each server;
        // the rest runs once, cluster-wide where it creates something, except the backfill,
        // once per shard.
        let each_server: Vec<&str> = cluster
            .iter()
            .filter(|s| s.runs == "each_server" && !s.sql.contains("ENGINE = Replicated"))
            .map(|s| s.sql.as_str())
            .collect();
        assert_eq!(each_server.len(), 7);
        assert!(
            each_server[..2]
                .iter()
                .all(|s| s.starts_with("ALTER TABLE analytics.events ADD"))
        );
        // Migration 7 shards events by visitor: its Distributed table made again.
        assert_eq!(each_server[2], "DROP TABLE IF EXISTS analytics.events");
        assert_eq!(
            each_server[3],
            "CREATE TABLE IF NOT EXISTS analytics.events AS analytics.events_local \
             ENGINE = Distributed(analytics, analytics, events_local, sipHash64(visitor_id))"
        );
        // Migration 11 adds each visitor's first conversion to the Distributed table too.
        assert!(
            each_server[4].starts_with(
                "ALTER TABLE analytics.experiment_visitors ADD COLUMN first_conversion"
            ),
            "{}",
            each_server[4]
        );
        // So does migration 20 its arms' hours, conversions and exposures' exclusion.
        assert!(
            each_server[5]
                .starts_with("ALTER TABLE analytics.experiment_visitors ADD COLUMN least_arm"),
            "{}",
            each_server[5]
        );
        // And migration 21 the stored metric values' history.
        assert!(
            each_server[6].starts_with(
                "ALTER TABLE analytics.visitor_metric_values ADD COLUMN metrics.pre_seen"
            ),
            "{}",
            each_server[6]
        );
        assert!(sql.iter().any(|s| s.ends_with(
            "ENGINE = Distributed(analytics, analytics, experiment_visitors_local, sipHash64(visitor_id))"
        )));
        let each_shard = || cluster.iter().filter(|s| s.runs == "each_shard");
        // Migrations 11 and 20 alter each shard's replicated table on one of its replicas.
        assert_eq!(
            each_shard()
                .filter(|s| s
                    .sql
                    .starts_with("ALTER TABLE analytics.experiment_visitors_local"))
                .count(),
            2
        );
        let backfill: Vec<&Statement> = each_shard()
            .filter(|s| s.sql.starts_with("INSERT"))
            .collect();
        assert_eq!(backfill.len(), 6);
        for (statement, (table, source)) in backfill.iter().zip([
            ("experiment_sessions", "events"),
            ("experiment_visitors", "events"),
            ("experiment_visitors", "events"),
            ("visitor_event_counts", "events"),
            ("visitor_metric_values", "experiment_metric_values"),
            ("experiment_visitors", "events"),
        ]) {
            assert!(
                statement
                    .sql
                    .starts_with(&format!("INSERT INTO analytics.{table}_local")),
                "{}",
                statement.sql
            );
            assert!(
                statement
                    .sql
                    .contains(&format!("FROM analytics.{source}_local")),
                "{}",
                statement.sql
            );
        }
        assert!(
            cluster
                .iter()
                .filter(|s| s.runs == "once" && s.sql.contains("CREATE"))
                .all(|s| s.sql.contains(" ON CLUSTER analytics"))
        );

        let new = ServerCaps::parse("26.9.2.1").expect("parses");
        assert!(
            statements(new, Some("analytics"), "analytics")
                .iter()
                .all(|s| s.settings.is_empty())
        );
    }

    #[test]
    fn a_copy_keeps_every_table_whole_on_every_server() {
        let old = ServerCaps::parse("18.16.1").expect("parses");
        let copy = statements_of(&Layout::whole(Some("analytics")), old, "analyst_a");
        let sql: Vec<&str> = copy.iter().map(|s| s.sql.as_str()).collect();
        assert!(
            sql.iter()
                .all(|s| !s.contains("Distributed") && !s.contains("_local"))
        );
        assert!(
            copy.iter()
                .all(|s| if s.sql.contains("ENGINE = Replicated") {
                    s.runs == "each_server" && !s.sql.contains("ON CLUSTER")
                } else {
                    s.runs == "once"
                }),
            "the tables on each server in turn, no per-shard step"
        );
        assert!(sql.iter().any(|s| {
            s.contains(
            "analyst_a.events (\n    event_id"
        ) && s.contains(
            "ReplicatedReplacingMergeTree('/clickhouse/tables/all/analyst_a/events', '{replica}')"
        )
        }));
        assert!(sql.iter().any(|s| s.starts_with(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS analyst_a.experiment_visitors_mv ON CLUSTER \
             analytics TO analyst_a.experiment_visitors AS"
        )));
        let single = statements_of(&Layout::whole(None), old, "analyst_a");
        let plain = statements(old, None, "analyst_a");
        assert_eq!(
            single.iter().map(|s| &s.sql).collect::<Vec<_>>(),
            plain.iter().map(|s| &s.sql).collect::<Vec<_>>(),
            "on one server a copy is the schema itself"
        );
    }
}

//! What the topology (one server or a cluster) changes in the statements: the names of
//! the tables, their engines, and where each statement runs.

use clickhouse_kit::topology::LOCAL_SUFFIX;

/// What the topology changes in the statements.
pub(crate) struct Layout {
    pub(crate) cluster: Option<String>,
    pub(crate) on_cluster: String,
    pub(crate) local: &'static str,
    /// Every table whole on every server of the cluster (a copy: [`migrate_copy`]), the
    /// sharded ones too: no `_local` part, no Distributed table.
    pub(crate) whole: bool,
}

impl Layout {
    pub(crate) fn new(cluster: Option<&str>) -> Self {
        Self {
            on_cluster: cluster.map_or_else(String::new, |c| format!(" ON CLUSTER {c}")),
            cluster: cluster.map(str::to_owned),
            local: if cluster.is_some() { LOCAL_SUFFIX } else { "" },
            whole: false,
        }
    }

    /// The layout of a copy: as [`Layout::new`], every table kept whole.
    pub(crate) fn whole(cluster: Option<&str>) -> Self {
        Self {
            local: "",
            whole: true,
            ..Self::new(cluster)
        }
    }

    /// Where a table's `CREATE` runs: in a cluster, on each server in turn, never
    /// `ON CLUSTER`. There 18.16 creates a table's replicas at the same moment; a replica
    /// that loses the race ("Retrying createReplica(), because some other replicas were
    /// created at the same time") can leave its server's DDL worker stuck, and every later
    /// `ON CLUSTER` statement then waits for that server until its timeout.
    pub(crate) fn create_target(&self) -> Target {
        match self.cluster {
            None => Target::Once,
            Some(_) => Target::EachServer,
        }
    }

    /// A table's engine: replicated in a cluster, across each shard (`{shard}` macro) or
    /// across every server (`all`). The `{replica}` macro must name each server uniquely.
    pub(crate) fn engine(&self, engine: &str, name: &str, shards: &str) -> String {
        match self.cluster {
            None => format!("{engine}()"),
            Some(_) => format!(
                "Replicated{engine}('/clickhouse/tables/{shards}/{{db}}/{name}', '{{replica}}')"
            ),
        }
    }
}

/// Where a rendered statement runs.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Once,
    EachServer,
    EachShard,
}

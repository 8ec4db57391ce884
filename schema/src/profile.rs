//! The schema as text: every statement that migrating a fresh database sends, for each
//! kind of server the consumer supports (`consumer --print-schema --profile P`). The output
//! is kept in `schema/rendered/P.sql`, so a change of the schema shows in review as a diff
//! of SQL, and a test fails when the kept files and the code differ.

use crate::caps::ServerCaps;
use crate::render::{Statement, statements};

/// The database the printed schema migrates (the services' default).
const DATABASE: &str = "analytics";

/// The cluster name of the printed cluster profiles (scripts/up's and the manifests').
const CLUSTER: &str = "analytics";

/// A kind of server and topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// ClickHouse 18.16 on one server.
    #[value(name = "18-single")]
    OldSingle,
    /// ClickHouse 18.16, two shards of two replicas (`CLICKHOUSE_CLUSTER=analytics`).
    #[value(name = "18-cluster")]
    OldCluster,
    /// ClickHouse 21 or later (checked on 26.9) on one server.
    #[value(name = "modern-single")]
    ModernSingle,
    /// ClickHouse 21 or later, as a cluster.
    #[value(name = "modern-cluster")]
    ModernCluster,
}

impl Profile {
    pub const ALL: [Profile; 4] = [
        Self::OldSingle,
        Self::OldCluster,
        Self::ModernSingle,
        Self::ModernCluster,
    ];

    /// The profile's name, as `--profile` takes it and `schema/rendered/` names its file.
    pub fn name(self) -> &'static str {
        match self {
            Self::OldSingle => "18-single",
            Self::OldCluster => "18-cluster",
            Self::ModernSingle => "modern-single",
            Self::ModernCluster => "modern-cluster",
        }
    }

    pub fn caps(self) -> ServerCaps {
        match self {
            Self::OldSingle | Self::OldCluster => ServerCaps { major: 18 },
            Self::ModernSingle | Self::ModernCluster => ServerCaps { major: 26 },
        }
    }

    pub fn cluster(self) -> Option<&'static str> {
        match self {
            Self::OldSingle | Self::ModernSingle => None,
            Self::OldCluster | Self::ModernCluster => Some(CLUSTER),
        }
    }

    /// Every statement that migrating a fresh database `analytics` sends, in order, each
    /// headed by where it runs and the settings sent with it.
    pub fn render(self) -> String {
        let mut out = format!(
            "-- The schema of database {DATABASE} as `consumer --print-schema --profile {}` \
             prints it:\n-- every statement that migrating a fresh database sends, in \
             order. Generated: do not edit.\n",
            self.name()
        );
        for (
            n,
            Statement {
                runs,
                sql,
                settings,
            },
        ) in statements(self.caps(), self.cluster(), DATABASE)
            .into_iter()
            .enumerate()
        {
            let runs = runs.replace('_', " ");
            out.push_str(&format!("\n-- {}. runs {runs}", n + 1));
            for (name, value) in settings {
                out.push_str(&format!(", with {name} = {value}"));
            }
            out.push('\n');
            out.push_str(&sql);
            out.push_str(";\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `schema/rendered/` as the code renders it. To write them again:
    /// `for p in 18-single 18-cluster modern-single modern-cluster; do
    ///   cargo run -q -p consumer -- --print-schema --profile $p > schema/rendered/$p.sql; done`
    /// (docs/development.md).
    #[test]
    fn the_kept_rendered_schema_is_what_the_code_renders() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rendered");
        for profile in Profile::ALL {
            let path = folder.join(format!("{}.sql", profile.name()));
            let kept = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                kept == profile.render(),
                "{} differs from what the code renders: regenerate it (docs/development.md)",
                path.display()
            );
        }
    }

    #[test]
    fn no_rendered_line_is_longer_than_160_characters() {
        for profile in Profile::ALL {
            let rendered = profile.render();
            let long: Vec<(usize, &str)> = rendered
                .lines()
                .enumerate()
                .filter(|(_, line)| line.chars().count() > 160)
                .map(|(n, line)| (n + 1, &line[..line.len().min(80)]))
                .collect();
            assert!(long.is_empty(), "{}: {long:#?}", profile.name());
        }
    }

    /// A fresh database gets each view once, as it is now: no view is made by a migration
    /// and dropped by a later one.
    #[test]
    fn a_fresh_migration_makes_each_view_once_and_drops_none() {
        for profile in Profile::ALL {
            let statements = statements(profile.caps(), profile.cluster(), DATABASE);
            let mut made: Vec<&str> = statements
                .iter()
                .filter_map(|s| s.sql.strip_prefix("CREATE VIEW IF NOT EXISTS analytics."))
                .map(|rest| rest.split([' ', '\n']).next().unwrap_or_default())
                .collect();
            assert_eq!(made.len(), crate::views::VIEWS.len(), "{}", profile.name());
            made.sort_unstable();
            made.dedup();
            assert_eq!(made.len(), crate::views::VIEWS.len(), "{}", profile.name());
            for view in crate::views::VIEWS {
                assert!(
                    statements.iter().all(|s| !s
                        .sql
                        .starts_with(&format!("DROP TABLE IF EXISTS analytics.{} ", view.name))
                        && s.sql != format!("DROP TABLE IF EXISTS analytics.{}", view.name)),
                    "{}: {} dropped",
                    profile.name(),
                    view.name
                );
            }
        }
    }
}

//! Where the rows go: one server, or the shards of a cluster, each a list of replicas.
//! Every copy of an event (a Kafka redelivery, a client's retry with the same `eventId`)
//! carries the same visitor, so it lands on the same shard, the one the Distributed
//! tables' sharding key `sipHash64(visitor_id)` picks: `FINAL` then counts it once, and a
//! visitor's aggregates stay on one shard. The servers are named by one set of flags,
//! [`ClickHouseArgs`], the consumer's and the commands' alike.

use std::hash::Hasher;

use anyhow::Context;
use clickhouse::Client;
use siphasher::sip::SipHasher24;

/// Where the analysts' database is, for the consumer and the commands: its flags.
#[derive(clap::Args, Clone, Debug)]
pub struct ClickHouseArgs {
    /// ClickHouse HTTP interface. For a cluster: every server, the shards separated by
    /// `;` in the cluster's order and the replicas of a shard by `,`.
    #[arg(long, env = "CLICKHOUSE_URL", default_value = "http://127.0.0.1:8123")]
    pub clickhouse_url: String,

    /// Name of the ClickHouse cluster (its `remote_servers` entry). Set: replicated tables
    /// sharded by visitor, read through Distributed ones. Unset: one server.
    #[arg(long, env = "CLICKHOUSE_CLUSTER")]
    pub clickhouse_cluster: Option<String>,

    /// ClickHouse database that holds the `events` table (the consumer creates it).
    #[arg(long, env = "CLICKHOUSE_DATABASE", default_value = "analytics")]
    pub clickhouse_database: String,

    /// ClickHouse user.
    #[arg(long, env = "CLICKHOUSE_USER", default_value = "default")]
    pub clickhouse_user: String,

    /// ClickHouse password.
    #[arg(
        long,
        env = "CLICKHOUSE_PASSWORD",
        default_value = "",
        hide_env_values = true
    )]
    pub clickhouse_password: String,
}

impl ClickHouseArgs {
    /// The servers of `CLICKHOUSE_URL`, per shard: shards separated by `;`, replicas by `,`.
    pub fn shard_urls(&self) -> Vec<Vec<&str>> {
        self.clickhouse_url
            .split(';')
            .map(|shard| {
                shard
                    .split(',')
                    .map(str::trim)
                    .filter(|url| !url.is_empty())
                    .collect()
            })
            .collect()
    }

    /// A client of the database on the first server of `CLICKHOUSE_URL`.
    pub fn client(&self) -> clickhouse::Client {
        let urls = self.shard_urls();
        self.client_of(urls.iter().flatten().next().copied().unwrap_or_default())
    }

    /// A client of the database on the server at `url`.
    pub fn client_of(&self, url: &str) -> clickhouse::Client {
        clickhouse::Client::default()
            .with_url(url)
            .with_user(&self.clickhouse_user)
            .with_password(&self.clickhouse_password)
            .with_database(&self.clickhouse_database)
            // Validation asks the server for a setting that ClickHouse 18.16 lacks.
            .with_validation(false)
    }
}

/// The suffix of a sharded table's per-replica part in a cluster (`events_local`).
pub const LOCAL_SUFFIX: &str = "_local";

/// The sharding key of the Distributed tables, in ClickHouse's words.
pub const SHARDING_KEY: &str = "sipHash64(visitor_id)";

/// One ClickHouse server.
#[derive(Clone)]
pub struct Server {
    pub url: String,
    pub client: Client,
}

/// The servers the consumer writes to.
#[derive(Clone)]
pub struct Topology {
    /// The cluster's name in `remote_servers`; `None` for one server.
    pub cluster: Option<String>,
    /// The replicas of each shard, in the cluster's shard order.
    pub shards: Vec<Vec<Server>>,
}

impl Topology {
    /// One server, as the single-server schema has it.
    pub fn single(client: Client) -> Self {
        Self {
            cluster: None,
            shards: vec![vec![Server {
                url: String::new(),
                client,
            }]],
        }
    }

    /// The topology `CLICKHOUSE_URL` and `CLICKHOUSE_CLUSTER` describe.
    pub fn from_args(args: &ClickHouseArgs) -> anyhow::Result<Self> {
        let Some(cluster) = &args.clickhouse_cluster else {
            anyhow::ensure!(
                !args.clickhouse_url.contains([',', ';']),
                "CLICKHOUSE_URL lists several servers but CLICKHOUSE_CLUSTER is not set"
            );
            let mut single = Self::single(args.client());
            single.shards[0][0].url = args.clickhouse_url.trim().to_owned();
            return Ok(single);
        };
        anyhow::ensure!(
            !cluster.is_empty() && is_sql_name(cluster),
            "CLICKHOUSE_CLUSTER {cluster:?} must be letters, digits and _ only"
        );
        let shards: Vec<Vec<Server>> = args
            .shard_urls()
            .into_iter()
            .map(|replicas| {
                replicas
                    .into_iter()
                    .map(|url| Server {
                        url: url.to_owned(),
                        client: args.client_of(url),
                    })
                    .collect()
            })
            .collect();
        anyhow::ensure!(
            shards.iter().all(|replicas| !replicas.is_empty()),
            "CLICKHOUSE_URL {:?} has a shard without a server",
            args.clickhouse_url
        );
        Ok(Self {
            cluster: Some(cluster.clone()),
            shards,
        })
    }

    /// The shard of the rows of visitor `visitor_id`.
    pub fn shard_of(&self, visitor_id: &[u8]) -> usize {
        if self.shards.len() == 1 {
            return 0;
        }
        (sip_hash64(visitor_id) % self.shards.len() as u64) as usize
    }

    /// Every server, shard after shard.
    pub fn servers(&self) -> impl Iterator<Item = &Server> {
        self.shards.iter().flatten()
    }

    /// The name of a sharded table's per-replica part: `events_local` in a cluster (the
    /// Distributed table keeps the plain name), the table itself on one server.
    pub fn local(&self) -> &'static str {
        if self.cluster.is_some() {
            LOCAL_SUFFIX
        } else {
            ""
        }
    }

    /// Refuses a cluster whose servers are grouped unlike the `{shard}` macros say: rows
    /// given to a "shard" whose servers do not replicate each other would not be found by
    /// a retry that went to another of them. Servers that do not answer are left out.
    pub async fn check(&self) -> anyhow::Result<()> {
        if self.cluster.is_none() {
            return Ok(());
        }
        let mut seen: Vec<(usize, String)> = Vec::new();
        for (index, replicas) in self.shards.iter().enumerate() {
            for server in replicas {
                let macro_shard = server
                    .client
                    .query("SELECT substitution FROM system.macros WHERE macro = 'shard'")
                    .fetch_optional::<String>()
                    .await;
                let macro_shard = match macro_shard {
                    Ok(Some(shard)) => shard,
                    Ok(None) => anyhow::bail!("{} has no {{shard}} macro", server.url),
                    Err(e) => {
                        tracing::warn!(url = %server.url, error = %e,
                            "ClickHouse server not reachable; its shard is not checked.");
                        continue;
                    }
                };
                if let Some((other, _)) = seen
                    .iter()
                    .find(|(i, s)| (*i == index) != (*s == macro_shard))
                {
                    anyhow::bail!(
                        "CLICKHOUSE_URL puts {} in shard {} but its {{shard}} macro {macro_shard:?} \
                         says otherwise (shard {} disagrees)",
                        server.url,
                        index + 1,
                        other + 1
                    );
                }
                seen.push((index, macro_shard));
            }
        }
        Ok(())
    }
}

/// ClickHouse's `sipHash64` of a string's bytes (SipHash-2-4, keys 0).
pub fn sip_hash64(bytes: &[u8]) -> u64 {
    let mut hasher = SipHasher24::new_with_keys(0, 0);
    hasher.write(bytes);
    hasher.finish()
}

/// The first of `servers` that answers.
pub async fn first_answering<'a>(
    servers: impl IntoIterator<Item = &'a Server>,
) -> anyhow::Result<&'a Server> {
    let mut last = None;
    for server in servers {
        // The database may not exist yet.
        let client = server.client.clone().with_database("default");
        match client.query("SELECT 1").fetch_one::<u8>().await {
            Ok(_) => return Ok(server),
            Err(e) => last = Some(anyhow::Error::new(e).context(server.url.clone())),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no ClickHouse server")))
        .context("no ClickHouse server answers")
}

/// Whether `name` can stand unquoted in a statement: letters, digits and _ only (a
/// database or cluster name is spliced into the SQL, not bound).
pub fn is_sql_name(name: &str) -> bool {
    name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        clickhouse: ClickHouseArgs,
    }

    fn topology(args: &[&str]) -> anyhow::Result<Topology> {
        let args = Args::try_parse_from(std::iter::once("test").chain(args.iter().copied()))
            .expect("flags parse");
        Topology::from_args(&args.clickhouse)
    }

    #[test]
    fn shards_and_replicas_come_from_the_url_list() {
        let cluster = topology(&[
            "--clickhouse-cluster=analytics",
            "--clickhouse-url=http://a:8123, http://b:8123;http://c:8123,http://d:8123",
        ])
        .expect("a cluster");
        let urls: Vec<Vec<&str>> = cluster
            .shards
            .iter()
            .map(|s| s.iter().map(|r| r.url.as_str()).collect())
            .collect();
        assert_eq!(
            urls,
            [
                ["http://a:8123", "http://b:8123"],
                ["http://c:8123", "http://d:8123"]
            ]
        );
        assert_eq!(cluster.local(), "_local");
        assert!(topology(&["--clickhouse-url=http://a:8123,http://b:8123"]).is_err());
        assert!(topology(&["--clickhouse-cluster=a b", "--clickhouse-url=http://a"]).is_err());
        assert!(topology(&["--clickhouse-cluster=c", "--clickhouse-url=http://a;"]).is_err());
        assert_eq!(topology(&[]).expect("one server").local(), "");
    }

    #[test]
    fn the_shard_is_clickhouse_siphash64_of_the_session() {
        let cluster = topology(&[
            "--clickhouse-cluster=c",
            "--clickhouse-url=http://a;http://b",
        ])
        .expect("a cluster");
        // SELECT sipHash64('abc') on ClickHouse 18.16: 4596069200710135518 (even).
        let mut hasher = SipHasher24::new_with_keys(0, 0);
        hasher.write(b"abc");
        assert_eq!(hasher.finish(), 4_596_069_200_710_135_518);
        assert_eq!(cluster.shard_of(b"abc"), 0);
        let spread = (0..1000)
            .filter(|i| cluster.shard_of(format!("s{i}").as_bytes()) == 1)
            .count();
        assert!((400..600).contains(&spread), "{spread}");
    }
}

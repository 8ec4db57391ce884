//! What the gate reads of an analyst's query before it goes to ClickHouse: the names that a
//! read-only user may reach on the server though they lead outside the analyst's own rows.
//!
//! The query is read as ClickHouse's lexer reads it, into one string: quoted strings and
//! identifiers with their escapes decoded and their quotes dropped, each comment and run of
//! blanks one space, all in lower case. `` `sys\x74em` . "processes" `` and
//! `system/**/.processes` both name `system.processes`. A name found anywhere in that string refuses the query, even
//! inside a string literal: a refusal too many costs the analyst a rewrite, a refusal
//! missed costs another analyst their data.
//!
//! Comments are read flat (`/* /* */` ends at the first `*/`), as 18.x does. Modern
//! servers nest them, which hides more text from the server than from this reading: a
//! refusal too many, never one missed. `#` is not read as a comment (18.x does not):
//! the text after it is screened too.

/// Functions refused wherever they appear, and why.
const FUNCTIONS: &[(&str, &str)] = &[
    (
        "hascolumnintable",
        "it reads the tables of every database and connects to other servers",
    ),
    ("joinget", "it reads Join tables of any database"),
    (
        "dictget",
        "it reads dictionaries, whose sources are outside the copy",
    ),
    (
        "dicthas",
        "it reads dictionaries, whose sources are outside the copy",
    ),
    (
        "dictisin",
        "it reads dictionaries, whose sources are outside the copy",
    ),
    ("modelevaluate", "it runs models outside the analyst's copy"),
    (
        "processlist",
        "it shows every user's running queries (system.processes)",
    ),
];

/// The tables of `system` an analyst may read: about the server's features, or filtered
/// to the analyst's own database by the server. Every other one (`processes`,
/// `query_log`, `zookeeper`, `events`, `metrics`, `clusters`…) shows other users' queries,
/// other sites' counts or the servers' addresses.
const SYSTEM_TABLES: &[&str] = &[
    "aggregate_function_combinators",
    "build_options",
    "collations",
    "columns",
    "contributors",
    "data_type_families",
    "databases",
    "formats",
    "functions",
    "mutations",
    "numbers",
    "one",
    "parts",
    "parts_columns",
    "settings",
    "table_engines",
    "table_functions",
    "tables",
    "time_zones",
];

/// A query the gate refuses: the name found and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub name: String,
    pub why: &'static str,
}

/// Refuses `sql` if it names a refused function or system table.
pub fn screen(sql: &str) -> Result<(), Refusal> {
    let text = read(sql);
    if let Some((name, why)) = FUNCTIONS.iter().find(|(name, _)| text.contains(name)) {
        return Err(Refusal {
            name: (*name).to_owned(),
            why,
        });
    }
    let mut rest = text.as_str();
    while let Some(at) = rest.find("system") {
        rest = &rest[at + "system".len()..];
        let Some(after) = rest.trim_start().strip_prefix('.') else {
            continue;
        };
        let table: String = after
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !SYSTEM_TABLES.contains(&table.as_str()) {
            return Err(Refusal {
                name: format!("system.{table}"),
                why: "it shows other users' queries, other sites' counts or the servers",
            });
        }
    }
    Ok(())
}

/// `sql` as the server's lexer reads it, reduced to one lower-case string (see the module).
fn read(sql: &str) -> String {
    let bytes = sql.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            quote @ (b'\'' | b'`' | b'"') => {
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\\' if i + 1 < bytes.len() => {
                            i += 1 + unescape(&bytes[i + 1..], &mut out);
                        }
                        c if c == quote && bytes.get(i + 1) == Some(&quote) => {
                            out.push(quote);
                            i += 2;
                        }
                        c if c == quote => {
                            i += 1;
                            break;
                        }
                        c => {
                            out.push(c);
                            i += 1;
                        }
                    }
                }
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                out.push(b' ');
                i += bytes[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .unwrap_or(bytes.len() - i);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                out.push(b' ');
                i += 2 + bytes[i + 2..]
                    .windows(2)
                    .position(|w| w == b"*/")
                    .map_or(bytes.len() - i - 2, |end| end + 2);
            }
            c if c.is_ascii_whitespace() => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).to_lowercase()
}

/// Decodes the escape after a backslash as ClickHouse does (`\xHH`, the C letters, any
/// other character as itself) into `out`; returns how many bytes it took.
fn unescape(after: &[u8], out: &mut Vec<u8>) -> usize {
    let hex = |c: u8| (c as char).to_digit(16);
    match after {
        [b'x', h, l, ..] if hex(*h).is_some() && hex(*l).is_some() => {
            out.push((hex(*h).unwrap_or(0) * 16 + hex(*l).unwrap_or(0)) as u8);
            3
        }
        [c, ..] => {
            out.push(match c {
                b'n' => b'\n',
                b't' => b'\t',
                b'r' => b'\r',
                b'0' => 0,
                c => *c,
            });
            1
        }
        [] => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(sql: &str) -> bool {
        screen(sql).is_err()
    }

    #[test]
    fn the_analysts_own_queries_pass() {
        for sql in [
            "SELECT count() FROM analyst_alice.events WHERE public_key = 'pk_a'",
            "SELECT * FROM analyst_alice.experiment_results FORMAT JSONEachRow",
            "SELECT name FROM system.tables WHERE database = currentDatabase()",
            "SELECT name, type FROM system.columns -- the schema\n WHERE table = 'events'",
            "SELECT 1 FROM system.one",
            "SELECT '--', 2 /* a note */",
        ] {
            assert_eq!(screen(sql), Ok(()), "{sql}");
        }
    }

    #[test]
    fn names_are_found_however_they_are_written() {
        for sql in [
            "SELECT hasColumnInTable('analytics', 'events', 'visitor_id')",
            "SELECT `hasColumnInTable`('analytics', 'events', 'x')",
            "SELECT `hasColumn\\x49nTable`('analytics', 'events', 'x')",
            "SELECT `hasColumn\\InTable`('analytics', 'events', 'x')",
            "SELECT \"HASCOLUMNINTABLE\"('analytics', 'events', 'x')",
            "SELECT joinGet('analytics.j', 'v', 1)",
            "SELECT dictGetString('d', 'a', toUInt64(1))",
            "SHOW PROCESSLIST",
            "SELECT query FROM system.processes",
            "SELECT 0 FROM system.processes UNION ALL SELECT sleep(3)",
            "SELECT query FROM system . processes",
            "SELECT query FROM `system`.`processes`",
            "SELECT query FROM \"system\".\"processes\"",
            "SELECT query FROM `sys\\x74em`.`process\\x65s`",
            "SELECT query FROM system/* hidden */.processes",
            "SELECT query FROM system--\n.processes",
            "SELECT '--' , query FROM system.query_log",
            "SELECT value FROM system.events WHERE event = 'InsertedRows'",
            "SELECT * FROM system.zookeeper WHERE path = '/'",
            "SELECT * FROM system.metrics",
            "SELECT * FROM system.asynchronous_metrics",
            "SELECT * FROM system.clusters",
            "SELECT /* /* */ * FROM system.events /* */",
        ] {
            assert!(refused(sql), "{sql}");
        }
    }

    #[test]
    fn a_refusal_names_what_it_found() {
        assert_eq!(
            screen("SELECT * FROM system.query_log").map_err(|r| r.name),
            Err("system.query_log".to_owned())
        );
    }
}

//! The pages read as a reader follows them: every relative link of every tracked Markdown
//! file leads to a file that exists (and to a heading of it, for `#anchor`s), and the
//! settings tables of docs/configuration.md are the binaries' own clap definitions.
//!
//! `UPDATE_DOCS=1 cargo nextest run --release -p e2e --test deploy` rewrites the generated
//! section of docs/configuration.md from clap.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use clap::CommandFactory;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository")
}

/// The Markdown files of the repository, relative to it: git's tracked files, or, without
/// git, every `.md` outside hidden folders, `target` and `node_modules`.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-z", "--cached", "--", "*.md"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|out| out.status.success());
    let mut files: Vec<PathBuf> = match listed {
        Some(out) => String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            // A file deleted but not yet committed is no page.
            .filter(|p| root.join(p).is_file())
            .collect(),
        None => markdown_files_in(root),
    };
    files.retain(|p| {
        !p.components()
            .any(|c| matches!(c, Component::Normal(n) if n == "node_modules" || n == "target"))
    });
    files.sort();
    files
}

/// The text of a page with its fenced code blocks and inline code spans blanked out (each
/// character a space, line breaks kept), so that offsets and line numbers stay those of
/// the page.
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fence: Option<String> = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        let is_fence =
            marker.len() >= 3 && marker.chars().all(|c| c == marker.as_bytes()[0] as char);
        match &fence {
            Some(open) => {
                if is_fence && marker.starts_with(open.as_str()) {
                    fence = None;
                }
                out.extend(line.chars().map(|c| if c == '\n' { c } else { ' ' }));
            }
            None if is_fence => {
                fence = Some(marker);
                out.extend(line.chars().map(|c| if c == '\n' { c } else { ' ' }));
            }
            None => out.push_str(&blank_code_spans(line)),
        }
    }
    out
}

/// A line with its code spans (`` `x` ``, ``` ``x`` ```) blanked out.
fn blank_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&c| c == '`').count();
        // The closing run of the same length, if any.
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let other = chars[j..].iter().take_while(|&&c| c == '`').count();
                if other == run {
                    close = Some(j);
                    break;
                }
                j += other;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                let end = j + run;
                out.extend(
                    chars[i..end]
                        .iter()
                        .map(|c| if *c == '\n' { '\n' } else { ' ' }),
                );
                i = end;
            }
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// One link of a page: its line and its target as written.
#[derive(Debug)]
struct Link {
    line: usize,
    target: String,
}

/// The links of a page: inline links and images (`[text](target)`, the text possibly over
/// several lines), reference definitions (`[name]: target`) and HTML `href`/`src`.
fn links(text: &str) -> Vec<Link> {
    let prose = prose(text);
    let line_of = |offset: usize| prose[..offset].matches('\n').count() + 1;
    let mut found = Vec::new();
    let bytes = prose.as_bytes();
    let mut from = 0;
    while let Some(at) = prose[from..].find("](") {
        let start = from + at + 2;
        // The target runs to the parenthesis that closes the one opened, nested ones kept.
        let mut depth = 1;
        let mut end = start;
        while end < bytes.len() && bytes[end] != b'\n' {
            match bytes[end] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            end += 1;
        }
        from = start;
        if depth != 0 {
            continue;
        }
        let inner = prose[start..end].trim();
        // `<target with spaces>` or `target "title"`.
        let target = match inner.strip_prefix('<') {
            Some(rest) => rest.split('>').next().unwrap_or_default(),
            None => inner.split_whitespace().next().unwrap_or_default(),
        };
        found.push(Link {
            line: line_of(start),
            target: target.to_owned(),
        });
    }
    let mut offset = 0;
    for line in prose.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('[')
            && let Some((name, target)) = rest.split_once("]:")
            && !name.is_empty()
            && !name.starts_with('^')
            && let Some(target) = target.split_whitespace().next()
        {
            found.push(Link {
                line: line_of(offset),
                target: target.trim_matches(['<', '>']).to_owned(),
            });
        }
        for attribute in ["href=\"", "src=\""] {
            for (at, _) in line.match_indices(attribute) {
                let rest = &line[at + attribute.len()..];
                if let Some(target) = rest.split('"').next() {
                    found.push(Link {
                        line: line_of(offset),
                        target: target.to_owned(),
                    });
                }
            }
        }
        offset += line.len();
    }
    found
}

/// Whether a target leaves the repository: a URL with a scheme, or protocol-relative.
fn is_external(target: &str) -> bool {
    if target.starts_with("//") {
        return true;
    }
    match target.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && !scheme.contains('/')
                && !scheme.contains('#')
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        }
        None => false,
    }
}

/// `%20` and the like, decoded.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        if bytes[i] == b'%'
            && let Some(byte) = hex
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// GitHub's anchor of a heading's text: lower case, the markup and the punctuation other
/// than `-` and `_` removed, spaces made `-`.
fn slug(heading: &str) -> String {
    // Link markup `[text](target)` reads as its text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](") else {
            break;
        };
        let Some(end) = rest[open + close..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + close]);
        rest = &rest[open + close + end + 1..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page: its headings' slugs (a repeated one numbered `-1`, `-2`, as
/// GitHub does) and the `id`s and `name`s of its HTML.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fenced = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            let heading = trimmed[hashes..].trim().trim_end_matches('#').trim_end();
            let base = slug(heading);
            let count = seen.entry(base.clone()).or_default();
            found.insert(if *count == 0 {
                base.clone()
            } else {
                format!("{base}-{count}")
            });
            *count += 1;
        }
        for attribute in ["id=\"", "name=\""] {
            for (at, _) in line.match_indices(attribute) {
                if let Some(id) = line[at + attribute.len()..].split('"').next() {
                    found.insert(id.to_owned());
                }
            }
        }
    }
    found
}

/// What is wrong with the relative links of the pages `files` (relative to `root`): one
/// line per link whose file or anchor does not exist.
fn broken_links(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut broken = Vec::new();
    let mut anchors_of: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(root.join(file))
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for link in links(&text) {
            let target = link.target.as_str();
            if target.is_empty() || is_external(target) {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target, None),
            };
            let path = percent_decoded(path.split('?').next().unwrap_or_default());
            let resolved = if path.is_empty() {
                file.clone()
            } else if let Some(absolute) = path.strip_prefix('/') {
                PathBuf::from(absolute)
            } else {
                file.parent().unwrap_or(Path::new("")).join(&path)
            };
            let Some(resolved) = normalized(&resolved) else {
                broken.push(format!(
                    "{}:{}: {target} leaves the repository",
                    file.display(),
                    link.line
                ));
                continue;
            };
            let on_disk = root.join(&resolved);
            if !on_disk.exists() {
                broken.push(format!(
                    "{}:{}: {target}: no file {}",
                    file.display(),
                    link.line,
                    resolved.display()
                ));
                continue;
            }
            let Some(anchor) = anchor.filter(|a| !a.is_empty()) else {
                continue;
            };
            if on_disk.extension().is_none_or(|e| e != "md") {
                continue; // `#L10` of a source file and the like: GitHub's, not a heading.
            }
            let known = anchors_of
                .entry(resolved.clone())
                .or_insert_with(|| anchors(&std::fs::read_to_string(&on_disk).unwrap_or_default()));
            let anchor = percent_decoded(anchor).to_lowercase();
            if !known.contains(&anchor) {
                broken.push(format!(
                    "{}:{}: {target}: {} has no heading #{anchor}",
                    file.display(),
                    link.line,
                    resolved.display()
                ));
            }
        }
    }
    broken
}

/// A relative path with its `.` and `..` resolved; `None` if it climbs out of the root.
fn normalized(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

#[test]
fn every_relative_link_of_the_pages_resolves() {
    let root = repo();
    let files = markdown_files(&root);
    assert!(
        files.iter().any(|f| f == Path::new("README.md"))
            && files.iter().any(|f| f.starts_with("docs")),
        "found no pages: {files:?}"
    );
    let broken = broken_links(&root, &files);
    assert!(
        broken.is_empty(),
        "{} broken link(s):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// The checker refuses what it must: a missing file, a missing heading, a link climbing out
/// of the repository, and it takes what GitHub takes.
#[test]
fn the_link_checker_refuses_a_broken_link() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let root = dir.path();
    std::fs::create_dir_all(root.join("docs/runs")).expect("folders");
    std::fs::write(
        root.join("README.md"),
        "# The `demo` page: one, two!\n\n## Étape 2 (fast)\n\n## Étape 2 (fast)\n\n\
         See [the guide](docs/guide.md#setting-up), [the same](./docs/guide.md),\n\
         [a run](docs/runs/2026-11-23.md), [here](#the-demo-page-one-two),\n\
         [again](#étape-2-fast-1), [out](https://example.com/x.md), <a href=\"docs/guide.md\">x</a>\n\
         and `[code](nowhere.md)`.\n\n```\n[fenced](nowhere.md)\n```\n\n\
         [moved](BENCHMARKS.md) and [over\ntwo lines](docs/gone.md)\n\
         [up](../outside.md), [anchor](docs/guide.md#no-such-heading)\n\n\
         [ref]: docs/missing.md\n",
    )
    .expect("README.md");
    std::fs::write(
        root.join("docs/guide.md"),
        "# Guide\n\n## Setting up\n\nBack to [the start](../README.md#étape-2-fast).\n",
    )
    .expect("guide");
    std::fs::write(
        root.join("docs/runs/2026-11-23.md"),
        "[the guide](../guide.md), [the method](../../BENCHMARKS.md)\n",
    )
    .expect("run");
    let files = markdown_files_in(root);
    let broken = broken_links(root, &files);
    let expected = [
        "README.md:16: BENCHMARKS.md: no file BENCHMARKS.md",
        "README.md:17: docs/gone.md: no file docs/gone.md",
        "README.md:18: ../outside.md leaves the repository",
        "README.md:18: docs/guide.md#no-such-heading: docs/guide.md has no heading #no-such-heading",
        "README.md:20: docs/missing.md: no file docs/missing.md",
        "docs/runs/2026-11-23.md:1: ../../BENCHMARKS.md: no file BENCHMARKS.md",
    ];
    assert_eq!(broken, expected, "{broken:#?}");
}

/// Every `.md` under `root` outside hidden folders, `target` and `node_modules`: the pages
/// of a folder that is no git work tree.
fn markdown_files_in(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(root.join(&dir)).expect("folder") {
            let entry = entry.expect("entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = dir.join(&name);
            if entry.path().is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    pending.push(path);
                }
            } else if name.ends_with(".md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

// The configuration reference.

const PAGE: &str = "docs/configuration.md";
const BEGIN: &str =
    "<!-- generated: UPDATE_DOCS=1 cargo nextest run --release -p e2e --test deploy -->";
const END: &str = "<!-- end generated -->";

/// Each binary's command, by the name it is run with.
fn binaries() -> Vec<(&'static str, clap::Command)> {
    vec![
        ("ingest", ingest::Config::command()),
        ("consumer", consumer::Config::command()),
        ("config-api", config_api::Config::command()),
        ("dlq-replay", tools::ReplayConfig::command()),
        (
            "experiment-results",
            tools::results::ResultsConfig::command(),
        ),
        (
            "experiment-results plan",
            tools::plan::PlanConfig::command(),
        ),
        ("analytics-access", tools::access::AccessConfig::command()),
        ("analytics-gate", tools::gate::GateConfig::command()),
        ("analytics-erase", tools::erase::EraseConfig::command()),
    ]
}

/// A table cell: one line, its pipes escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// `text` as inline code, in a fence longer than any run of backticks it holds; an empty
/// text as the word.
fn code(text: &str) -> String {
    if text.is_empty() {
        "empty".to_owned()
    } else if text.contains('`') {
        format!("`` {} ``", text.replace('|', "\\|"))
    } else {
        format!("`{}`", text.replace('|', "\\|"))
    }
}

/// `text` ended as a sentence, then `more`.
fn sentence(text: &str, more: &str) -> String {
    let text = text.trim_end();
    match text.chars().last() {
        None => more.to_owned(),
        Some('.' | '!' | '?' | ':') => format!("{text} {more}"),
        Some(_) => format!("{text}. {more}"),
    }
}

/// The rows of one command's settings, then those of its subcommands.
fn render_command(name: &str, command: &clap::Command, out: &mut String) {
    let arguments: Vec<&clap::Arg> = command
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter(|a| {
            !matches!(
                a.get_action(),
                clap::ArgAction::Help
                    | clap::ArgAction::HelpShort
                    | clap::ArgAction::HelpLong
                    | clap::ArgAction::Version
            )
        })
        .collect();
    if !arguments.is_empty() {
        out.push_str(&format!("\n### `{name}`\n\n"));
        if let Some(about) = command.get_about() {
            out.push_str(&format!("{}\n\n", cell(&sentence(&about.to_string(), ""))));
        }
        out.push_str("| flag | variable | default | meaning |\n|---|---|---|---|\n");
        for arg in arguments {
            // A value's name where the help text speaks of it: one chosen, not the field's.
            let value_name = arg
                .get_value_names()
                .filter(|_| arg.get_long().is_some() || arg.get_short().is_some())
                .map(|names| {
                    names
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .filter(|name| *name != arg.get_id().as_str().to_uppercase())
                .map(|name| format!(" {name}"))
                .unwrap_or_default();
            let flag = match (arg.get_long(), arg.get_short()) {
                (Some(long), Some(short)) => format!("`--{long}{value_name}`, `-{short}`"),
                (Some(long), None) => format!("`--{long}{value_name}`"),
                (None, Some(short)) => format!("`-{short}{value_name}`"),
                (None, None) => {
                    let value = arg
                        .get_value_names()
                        .and_then(|names| names.first().map(ToString::to_string))
                        .unwrap_or_else(|| arg.get_id().to_string().to_uppercase());
                    format!("`{value}` (argument)")
                }
            };
            let variable = arg
                .get_env()
                .map(|e| code(&e.to_string_lossy()))
                .unwrap_or_default();
            let takes_value = !matches!(
                arg.get_action(),
                clap::ArgAction::SetTrue | clap::ArgAction::SetFalse | clap::ArgAction::Count
            );
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let default = if arg.is_hide_default_value_set() || !takes_value || defaults.is_empty()
            {
                String::new()
            } else {
                code(&defaults.join(","))
            };
            let mut meaning = arg
                .get_long_help()
                .or_else(|| arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| code(v.get_name()))
                .collect();
            if takes_value && !values.is_empty() {
                meaning = sentence(&meaning, &format!("One of {}.", values.join(", ")));
            }
            if arg.is_required_set() {
                meaning = sentence(&meaning, "Required.");
            }
            out.push_str(&format!(
                "| {flag} | {variable} | {default} | {} |\n",
                cell(&sentence(&meaning, ""))
            ));
        }
    }
    for sub in command.get_subcommands() {
        render_command(&format!("{name} {}", sub.get_name()), sub, out);
    }
}

/// The generated section: every binary's settings from its clap definition.
fn reference() -> String {
    let mut out = String::from(
        "\nThe settings of each binary, from its own definition (`--help` prints the same).\n\
         A flag overrides its variable, which overrides the default.\n",
    );
    for (name, command) in binaries() {
        render_command(name, &command, &mut out);
    }
    out.push('\n');
    out
}

#[test]
fn the_configuration_reference_is_the_binaries_settings() {
    let path = repo().join(PAGE);
    let page = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{PAGE}: {e}"));
    let (before, rest) = page
        .split_once(BEGIN)
        .unwrap_or_else(|| panic!("{PAGE} has no line {BEGIN}"));
    let (current, after) = rest
        .split_once(END)
        .unwrap_or_else(|| panic!("{PAGE} has no line {END} after {BEGIN}"));
    let fresh = reference();
    if current == fresh {
        return;
    }
    if std::env::var_os("UPDATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(&path, format!("{before}{BEGIN}{fresh}{END}{after}"))
            .unwrap_or_else(|e| panic!("{PAGE}: {e}"));
        return;
    }
    let first = current
        .lines()
        .zip(fresh.lines())
        .position(|(a, b)| a != b)
        .unwrap_or(current.lines().count().min(fresh.lines().count()));
    panic!(
        "{PAGE}'s generated settings are stale (first difference at line {} of the section:\n\
         page:      {:?}\nbinaries:  {:?}).\n\
         Refresh it: UPDATE_DOCS=1 cargo nextest run --release -p e2e --test deploy",
        first + 1,
        current.lines().nth(first).unwrap_or("(end)"),
        fresh.lines().nth(first).unwrap_or("(end)"),
    );
}

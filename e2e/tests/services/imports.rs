//! No two files of a crate import each other, directly or around a circle: the state a
//! route needs lives below both, and a file's tests that need a higher file live in the
//! crate's `tests/`. Every `crate::`, `super::` and `self::` path of every file under each
//! member's `src/` (and a `use` of a child module by its bare name) is an edge from the
//! file's module to the deepest module the path names; `mod` declarations and the `use`s
//! of documentation links (`#[cfg(doc)]`) are not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module of one crate root: its path from the root (`[]` for the root itself).
type Module = Vec<String>;

/// The workspace's members, from the root Cargo.toml.
fn members(repo: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(repo.join("Cargo.toml")).expect("Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(|m| repo.join(m))
        .collect()
}

/// The crate roots of a member and the files of each, by module: `lib.rs` (or `main.rs`
/// without a library) with the other files of `src/`, and each other binary on its own.
fn roots(src: &Path) -> Vec<(String, BTreeMap<Module, PathBuf>)> {
    let mut files = Vec::new();
    collect(src, &mut files);
    let library = src.join("lib.rs").exists();
    let mut tree = BTreeMap::new();
    let mut alone = Vec::new();
    for file in files {
        let relative = file.strip_prefix(src).expect("under src");
        let name = relative.to_string_lossy().into_owned();
        if relative.starts_with("bin") || (library && name == "main.rs") {
            alone.push((name, BTreeMap::from([(Vec::new(), file)])));
            continue;
        }
        let mut module: Module = relative
            .with_extension("")
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        if matches!(name.as_str(), "lib.rs" | "main.rs")
            || module.last().is_some_and(|m| m == "mod")
        {
            module.pop();
        }
        tree.insert(module, file);
    }
    let mut all = vec![("src".to_owned(), tree)];
    all.extend(alone);
    all
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    Colons,
    Open,
    Close,
    Comma,
    Other,
}

/// The tokens of Rust text without its comments and string literals, each with whether it
/// sits inside an inline module (`mod name {` at the start of a line), where `super` is
/// the file's own module.
fn tokens(text: &str) -> Vec<(Token, bool)> {
    let mut out = Vec::new();
    let mut inline = false;
    // A `use` for the documentation's links only (after `#[cfg(doc)]`) is no import.
    let mut doc_only = false;
    // A string literal may go on over several lines.
    let mut in_string = false;
    for line in text.lines() {
        if !in_string {
            if line.trim() == "#[cfg(doc)]" {
                doc_only = true;
                continue;
            }
            if doc_only {
                doc_only = !line.trim_end().ends_with(';');
                continue;
            }
            if line.starts_with("mod ") || line.starts_with("pub mod ") {
                inline |= line.trim_end().ends_with('{');
            } else if line == "}" {
                inline = false;
            }
        }
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            i += 1;
            if in_string {
                match c {
                    '\\' => i += 1,
                    '"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            let token = match c {
                '"' => {
                    in_string = true;
                    continue;
                }
                // A quote as a character: '"' or '\"'.
                '\'' if chars.get(i) == Some(&'"') => {
                    i += 2;
                    continue;
                }
                '\'' if chars.get(i) == Some(&'\\') => {
                    i += 3;
                    continue;
                }
                '/' if chars.get(i) == Some(&'/') => break,
                ':' if chars.get(i) == Some(&':') => {
                    i += 1;
                    Token::Colons
                }
                '{' => Token::Open,
                '}' => Token::Close,
                ',' => Token::Comma,
                c if c.is_alphanumeric() || c == '_' => {
                    let mut word = c.to_string();
                    while let Some(&n) = chars.get(i).filter(|n| n.is_alphanumeric() || **n == '_')
                    {
                        word.push(n);
                        i += 1;
                    }
                    Token::Word(word)
                }
                c if c.is_whitespace() => continue,
                _ => Token::Other,
            };
            out.push((token, inline));
        }
    }
    out
}

/// The paths that start at `at` (just after a first segment and its `::`), each as the
/// segments after that first one; `{a, b::{c, self}}` groups give one path each.
fn paths_from(tokens: &[(Token, bool)], mut at: usize) -> Vec<Vec<String>> {
    let mut path = Vec::new();
    loop {
        match tokens.get(at).map(|t| &t.0) {
            Some(Token::Word(w)) => {
                if w != "self" {
                    path.push(w.clone());
                }
                at += 1;
                if tokens.get(at).map(|t| &t.0) != Some(&Token::Colons) {
                    return vec![path];
                }
                at += 1;
            }
            Some(Token::Open) => {
                let mut found = Vec::new();
                let mut depth = 0;
                let mut entry_start = at + 1;
                for i in at + 1..tokens.len() {
                    match tokens[i].0 {
                        Token::Open => depth += 1,
                        Token::Close if depth > 0 => depth -= 1,
                        Token::Comma | Token::Close if depth == 0 => {
                            if entry_start < i {
                                for rest in paths_from(tokens, entry_start) {
                                    found.push(path.iter().cloned().chain(rest).collect());
                                }
                            }
                            if tokens[i].0 == Token::Close {
                                break;
                            }
                            entry_start = i + 1;
                        }
                        _ => {}
                    }
                }
                return found;
            }
            _ => return vec![path],
        }
    }
}

/// The modules of `tree` that `module`'s file refers to, other than itself.
fn edges(tree: &BTreeMap<Module, PathBuf>, module: &Module, text: &str) -> BTreeSet<Module> {
    let tokens = tokens(text);
    let mut found = BTreeSet::new();
    for (i, (token, inline)) in tokens.iter().enumerate() {
        let Token::Word(word) = token else { continue };
        let starts_path = tokens.get(i + 1).map(|t| &t.0) == Some(&Token::Colons)
            && (i == 0 || tokens[i - 1].0 != Token::Colons);
        if !starts_path {
            continue;
        }
        let after_use = i > 0 && tokens[i - 1].0 == Token::Word("use".to_owned());
        let base: Option<Module> = match word.as_str() {
            "crate" => Some(Vec::new()),
            "self" => Some(module.clone()),
            "super" if *inline => Some(module.clone()),
            "super" => Some(module[..module.len().saturating_sub(1)].to_vec()),
            child if after_use => {
                let mut m = module.clone();
                m.push(child.to_owned());
                tree.contains_key(&m).then_some(module.clone())
            }
            _ => None,
        };
        let Some(base) = base else { continue };
        let start = if matches!(word.as_str(), "crate" | "self" | "super") {
            i + 2
        } else {
            i
        };
        for rest in paths_from(&tokens, start) {
            let mut full = base.clone();
            for segment in rest {
                if segment == "super" {
                    full.pop();
                } else {
                    full.push(segment);
                }
            }
            while !full.is_empty() && !tree.contains_key(&full) {
                full.pop();
            }
            if &full != module {
                found.insert(full);
            }
        }
    }
    found
}

/// A circle of the graph, if there is one, as the modules around it.
fn circle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        node: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        done: &mut BTreeSet<Module>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        if let Some(at) = stack.iter().position(|m| m == node) {
            return Some(stack[at..].to_vec());
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, done, stack) {
                return Some(found);
            }
        }
        stack.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

fn name(module: &Module) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

fn graph_of(tree: &BTreeMap<Module, PathBuf>) -> BTreeMap<Module, BTreeSet<Module>> {
    tree.iter()
        .map(|(module, file)| {
            let text = std::fs::read_to_string(file).expect("a source file");
            (module.clone(), edges(tree, module, &text))
        })
        .collect()
}

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut circles = Vec::new();
    let mut files = 0;
    for member in members(&repo) {
        for (root, tree) in roots(&member.join("src")) {
            files += tree.len();
            if let Some(found) = circle(&graph_of(&tree)) {
                let names: Vec<String> = found.iter().map(name).collect();
                circles.push(format!(
                    "{} ({root}): {} -> {}",
                    member.file_name().unwrap_or_default().to_string_lossy(),
                    names.join(" -> "),
                    names[0]
                ));
            }
        }
    }
    assert!(files > 50, "only {files} source files found");
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// The parser finds each kind of path, and the check finds the circle they make.
#[test]
fn every_kind_of_path_is_an_edge_and_a_circle_is_found() {
    let tree: BTreeMap<Module, PathBuf> = [
        vec![],
        vec!["app".to_owned()],
        vec!["routes".to_owned()],
        vec!["routes".to_owned(), "ping".to_owned()],
        vec!["state".to_owned()],
    ]
    .into_iter()
    .map(|m| (m, PathBuf::new()))
    .collect();
    let m = |s: &str| -> Module {
        if s.is_empty() {
            vec![]
        } else {
            s.split("::").map(str::to_owned).collect()
        }
    };
    let routes = m("routes");
    let found = edges(
        &tree,
        &routes,
        "use crate::{app::App, state::{self, State}};\nuse ping::Pong;\n\
         fn f() { super::Root; let s = \"crate::state::X\"; } // crate::nothing\n\
         #[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
    );
    assert_eq!(
        found,
        BTreeSet::from([m("app"), m("state"), m("routes::ping"), m("")])
    );
    let found = edges(
        &tree,
        &m("routes::ping"),
        "use super::super::app;\nuse self::inner;\n#[cfg(doc)]\nuse crate::{\n    state::Doc};\n\
         const SQL: &str = \"a // b\n  crate::state::X\";\nconst Q: char = '\"'; use crate::routes;\n",
    );
    assert_eq!(found, BTreeSet::from([m("app"), m("routes")]));
    let mut graph = graph_of(&BTreeMap::new());
    graph.insert(m("app"), BTreeSet::from([m("routes")]));
    graph.insert(m("routes"), BTreeSet::from([m("state"), m("app")]));
    graph.insert(m("state"), BTreeSet::new());
    assert_eq!(circle(&graph), Some(vec![m("app"), m("routes")]));
    graph.insert(m("routes"), BTreeSet::from([m("state")]));
    assert_eq!(circle(&graph), None);
}

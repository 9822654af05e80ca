//! The layer map in README.md is the rule; this test holds the source tree
//! to it. For every file under `src/` it finds the folder ("unit") the
//! file belongs to and every `crate::` / `super::` path the code names,
//! and fails on:
//! * an edge to a unit the map does not allow that unit to use;
//! * any loop between units (even through allowed edges);
//! * an OS import (`mio`, `nix`, `libc`, `std::os`) outside the files the
//!   map names for that unit;
//! * a folder under `src/` that the map does not list.
//!
//! Files that are whole test modules (`#[cfg(test)] mod x;`) are skipped:
//! tests may reach across layers; the product may not.
//!
//! `scripts/check-layering.sh` runs this test alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// One row of the map: a folder, the units it may use, and where in it OS
/// imports are allowed (`all`, `none`, or files and folders relative to it).
struct Unit {
    folder: String,
    may_use: BTreeSet<String>,
    os: OsRule,
}

enum OsRule {
    All,
    None,
    Only(Vec<String>),
}

fn cell_words(cell: &str) -> Vec<String> {
    cell.split(',')
        .map(|w| w.trim().trim_matches('`').trim().to_string())
        .filter(|w| !w.is_empty() && w != "—" && w != "-")
        .collect()
}

/// Reads the table between `<!-- layers -->` and `<!-- /layers -->`.
fn layer_map(readme: &str) -> Vec<Unit> {
    let start = readme
        .find("<!-- layers -->")
        .expect("README has no layer map");
    let end = readme
        .find("<!-- /layers -->")
        .expect("layer map not closed");
    let mut units = Vec::new();
    for line in readme[start..end].lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 || !cells[1].starts_with("`src") {
            continue;
        }
        let folder = cells[1].trim_matches('`').trim_end_matches('/').to_string();
        let may_use = cell_words(cells[2])
            .into_iter()
            .map(|w| format!("src/{}", w.trim_end_matches('/')))
            .collect();
        let os = match cells[3].trim_matches('`') {
            "all" => OsRule::All,
            "none" => OsRule::None,
            other => OsRule::Only(cell_words(other)),
        };
        units.push(Unit {
            folder,
            may_use,
            os,
        });
    }
    units
}

/// The unit owning `path` (a `src/...` path): the longest listed folder
/// that contains it. Files directly in `src/` belong to no unit.
fn owner<'a>(units: &'a [Unit], path: &str) -> Option<&'a Unit> {
    units
        .iter()
        .filter(|u| path == u.folder || path.starts_with(&format!("{}/", u.folder)))
        .max_by_key(|u| u.folder.len())
}

/// The module path of a file: `src/a/b/mod.rs` and `src/a/b.rs` -> [a, b].
fn module_of(path: &str) -> Vec<String> {
    let rel = path.trim_start_matches("src/").trim_end_matches(".rs");
    let mut parts: Vec<String> = rel.split('/').map(String::from).collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts
}

/// Code without comments (line comments and doc comments).
fn code_lines(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path the code names from the crate root, as `src/...` strings:
/// `crate::a::b`, `crate::{a, b}`, `super::x` (resolved against `module`).
fn named_paths(code: &str, module: &[String]) -> Vec<String> {
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    // An identifier at `at`, and where it ends.
    let word = |at: usize| {
        let end = (at..b.len()).find(|&j| !ident(b[j])).unwrap_or(b.len());
        (&code[at..end], end)
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let at_word = i == 0 || !ident(b[i - 1]);
        let mut base = Vec::new();
        let mut j = i;
        if at_word && b[i..].starts_with(b"crate::") {
            j += "crate::".len();
        } else if at_word && b[i..].starts_with(b"super::") {
            base = module.to_vec();
            while b[j..].starts_with(b"super::") {
                base.pop();
                j += "super::".len();
            }
        } else {
            i += 1;
            continue;
        }
        if b.get(j) == Some(&b'{') {
            let close = code[j..].find('}').map_or(b.len(), |k| j + k);
            for name in code[j + 1..close].split(',') {
                let first = name.trim().split("::").next().unwrap_or("").trim();
                if !first.is_empty() && first != "self" {
                    out.push(path_str(&base, &[first]));
                }
            }
        } else {
            let mut segs = Vec::new();
            let mut k = j;
            loop {
                let (w, end) = word(k);
                if w.is_empty() {
                    break;
                }
                segs.push(w);
                if !b[end..].starts_with(b"::") {
                    break;
                }
                k = end + 2;
            }
            out.push(path_str(&base, &segs));
        }
        i = j;
    }
    out
}

fn path_str(base: &[String], segs: &[&str]) -> String {
    let mut p = String::from("src");
    for s in base.iter().map(String::as_str).chain(segs.iter().copied()) {
        p.push('/');
        p.push_str(s);
    }
    p
}

/// `crate::log_warn!` and friends are defined in `src/base/log.rs`.
fn macro_home(path: &str) -> String {
    if path.starts_with("src/log_") {
        "src/base/log".to_string()
    } else {
        path.to_string()
    }
}

fn os_import(code: &str) -> bool {
    [
        "mio::",
        "nix::",
        "libc::",
        "std::os::",
        "use mio",
        "use nix",
        "use libc",
    ]
    .iter()
    .any(|p| code.contains(p))
}

fn os_allowed(unit: &Unit, path: &str) -> bool {
    match &unit.os {
        OsRule::All => true,
        OsRule::None => false,
        OsRule::Only(list) => {
            let rel = &path[unit.folder.len() + 1..];
            list.iter()
                .any(|e| rel == e || (e.ends_with('/') && rel.starts_with(e.as_str())))
        }
    }
}

/// Files that are whole test modules (`#[cfg(test)] mod x;` in their
/// parent): test code may reach across layers to check them; the product
/// may not.
fn test_only_files(files: &[(String, String)]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (path, text) in files {
        let dir = match path.rsplit_once('/') {
            Some((d, f)) if f == "mod.rs" || f == "lib.rs" => d.to_string(),
            Some((d, f)) => format!("{d}/{}", f.trim_end_matches(".rs")),
            None => continue,
        };
        let mut lines = text.lines().map(str::trim);
        while let Some(l) = lines.next() {
            if l != "#[cfg(test)]" {
                continue;
            }
            let Some(name) = lines.next().and_then(|n| n.strip_prefix("mod ")) else {
                continue;
            };
            if let Some(name) = name.strip_suffix(';') {
                out.insert(format!("{dir}/{name}.rs"));
                out.insert(format!("{dir}/{name}/mod.rs"));
            }
        }
    }
    out
}

/// Checks `files` (path under `src/`, text) against the map in `readme`.
/// Returns every violation found.
fn check(readme: &str, files: &[(String, String)]) -> Vec<String> {
    let units = layer_map(readme);
    assert!(units.len() > 5, "layer map not found in README");
    let mut bad = Vec::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let tests_only = test_only_files(files);
    for (path, text) in files {
        if tests_only.contains(path) {
            continue;
        }
        let Some(unit) = owner(&units, path) else {
            let container = path.strip_suffix("/mod.rs").is_some_and(|dir| {
                units
                    .iter()
                    .any(|u| u.folder.starts_with(&format!("{dir}/")))
            });
            if path.matches('/').count() > 1 && !container {
                bad.push(format!("{path}: its folder is not in README's layer map"));
            }
            continue;
        };
        let code = code_lines(text);
        if os_import(&code) && !os_allowed(unit, path) {
            bad.push(format!(
                "{path}: OS import in {} outside the files the map allows",
                unit.folder
            ));
        }
        for target in named_paths(&code, &module_of(path)) {
            let target = macro_home(&target);
            let Some(to) = owner(&units, &target) else {
                continue; // the crate root (VERSION, macros' re-exports)
            };
            if to.folder == unit.folder {
                continue;
            }
            if !unit.may_use.contains(&to.folder) {
                bad.push(format!(
                    "{path}: {} may not use {} (names {target})",
                    unit.folder, to.folder
                ));
            }
            edges
                .entry(unit.folder.clone())
                .or_default()
                .insert(to.folder.clone());
        }
    }
    bad.extend(loops(&edges));
    bad
}

/// Every loop in the unit graph, as "a -> b -> a".
fn loops(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut found = BTreeSet::new();
    for start in edges.keys() {
        // Depth-first from `start`, reporting paths that come back to it.
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((node, path)) = stack.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(start.clone());
                    let mut key = cycle[..cycle.len() - 1].to_vec();
                    key.sort();
                    if found.insert(key) {
                        continue;
                    }
                } else if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    found
        .into_iter()
        .map(|units| format!("loop between {}", units.join(", ")))
        .collect()
}

fn source_files() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let rel = p.strip_prefix(ROOT).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(ROOT).join("src"), &mut out);
    out
}

fn readme() -> String {
    std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap()
}

#[test]
fn the_tree_follows_the_layer_map() {
    let bad = check(&readme(), &source_files());
    assert!(bad.is_empty(), "layering violations:\n{}", bad.join("\n"));
}

#[test]
fn a_planted_violation_fails() {
    let mut files = source_files();
    files.push((
        "src/tracing/service/planted.rs".into(),
        "use crate::cmd::session;\nfn f() { let _ = libc::getpid(); }\n".into(),
    ));
    files.push((
        "src/base/planted.rs".into(),
        "use crate::ipc::frame;\n".into(),
    ));
    let bad = check(&readme(), &files);
    assert!(
        bad.iter()
            .any(|b| b.contains("src/tracing/service may not use src/cmd")),
        "{bad:?}"
    );
    assert!(
        bad.iter().any(|b| b.contains("planted.rs: OS import")),
        "{bad:?}"
    );
    assert!(
        bad.contains(&"loop between src/base, src/ipc".to_string()),
        "{bad:?}"
    );
}

#[test]
fn a_planted_loop_fails_even_when_both_edges_are_allowed() {
    let map = "<!-- layers -->\n| folder | may use | OS access |\n|---|---|---|\n\
               | `src/a` | `b` | none |\n| `src/b` | `a` | none |\n| `src/c` | — | none |\n\
               | `src/d` | — | none |\n| `src/e` | — | none |\n| `src/f` | — | none |\n<!-- /layers -->";
    let files = vec![
        ("src/a/x.rs".to_string(), "use crate::b::y;".to_string()),
        (
            "src/b/y.rs".to_string(),
            "use super::super::a::x;".to_string(),
        ),
        ("src/g/z.rs".to_string(), String::new()),
    ];
    let bad = check(map, &files);
    assert!(
        bad.contains(&"loop between src/a, src/b".to_string()),
        "{bad:?}"
    );
    assert!(
        bad.iter()
            .any(|b| b.contains("src/g/z.rs: its folder is not")),
        "{bad:?}"
    );
    assert!(!bad.iter().any(|b| b.contains("may not use")), "{bad:?}");
}

#[test]
fn test_modules_are_not_layered() {
    let files = vec![
        (
            "src/a/mod.rs".to_string(),
            "#[cfg(test)]\nmod checks;\nmod x;".to_string(),
        ),
        (
            "src/a/checks.rs".to_string(),
            "use crate::b::y;".to_string(),
        ),
        ("src/a/x.rs".to_string(), String::new()),
    ];
    let only = test_only_files(&files);
    assert!(only.contains("src/a/checks.rs"));
    assert!(!only.contains("src/a/x.rs"));
}

#[test]
fn paths_are_resolved() {
    let m = module_of("src/traced_probes/ftrace/tracefs.rs");
    assert_eq!(m, ["traced_probes", "ftrace", "tracefs"]);
    let got = named_paths(
        "use super::parse::format;\nlet v = crate::VERSION; use crate::{log_warn, pb::x};",
        &m,
    );
    assert_eq!(
        got,
        [
            "src/traced_probes/ftrace/parse/format",
            "src/VERSION",
            "src/log_warn",
            "src/pb"
        ]
    );
    assert_eq!(
        code_lines("a // crate::x\n\"//\" crate::y"),
        "a \n\"//\" crate::y"
    );
}

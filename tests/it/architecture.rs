//! The workspace's shape, checked like behaviour is:
//!
//! - no file-level import cycle inside a crate, beyond the known ones listed in
//!   [`KNOWN_CYCLES`] (a list that may only shrink: a new cycle, or a file joining a known
//!   one, fails);
//! - no tool crate (a binary's library: server, router, invalidator, bench, floor) depends on
//!   another tool crate, without exception;
//! - the test kit (`memfleet-testkit`: scratch PostgreSQL, child processes) is no product
//!   crate's normal dependency, only a dev-dependency (the tools that start real servers,
//!   bench and the `memfleet` binary, may link it);
//! - the product binary (`memfleet` without the `lab` feature, as the package and the image
//!   build it) links no lab crate (bench, sim, floor, load generator, results, test kit),
//!   directly or through another crate (`cargo tree`);
//! - every file path and every type-like name (`CamelCase`) that `docs/ARCHITECTURE.md`
//!   puts in backquotes exists in the repository.
//!
//! A module's edges are its `crate::`, `super::` and `self::` paths outside its trailing
//! `#[cfg(test)] mod tests`, resolved to the longest module that is a file.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

/// Cycles that exist today, by crate directory and module path: each found cycle must lie
/// inside one of these. Remove an entry once its cycle is gone.
const KNOWN_CYCLES: &[(&str, &[&str])] = &[];

/// The crates behind one `memfleet` subcommand each; none may depend on another.
const TOOLS: &[&str] = &[
    "memfleet-bench",
    "memfleet-floor",
    "memfleet-invalidator",
    "memfleet-router",
    "memfleet-server",
];

/// What ships to operators: the test kit may be only their dev-dependency.
const PRODUCT: &[&str] = &[
    "memfleet-authfile",
    "memfleet-client",
    "memfleet-http",
    "memfleet-invalidator",
    "memfleet-number",
    "memfleet-protocol",
    "memfleet-router",
    "memfleet-routing",
    "memfleet-server",
    "memfleet-storage",
    "memfleet-tls",
];

/// The lab: experiments, the simulator, yardsticks and the test kit. Never in the product.
const LAB: &[&str] = &[
    "memfleet-bench",
    "memfleet-floor",
    "memfleet-loadgen",
    "memfleet-results",
    "memfleet-sim",
    "memfleet-testkit",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every crate directory of the workspace (relative), with its `src`.
fn crate_dirs() -> Vec<String> {
    let mut dirs = vec![".".to_string()];
    for entry in fs::read_dir(root().join("crates")).unwrap() {
        let path = entry.unwrap().path();
        if path.join("Cargo.toml").exists() && path.join("src").is_dir() {
            dirs.push(format!(
                "crates/{}",
                path.file_name().unwrap().to_string_lossy()
            ));
        }
    }
    dirs.sort();
    dirs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Module path (`a::b`, "" for the crate root) → file, for one crate's `src`.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut mods = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let mut name = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("::");
        if let Some(parent) = name.strip_suffix("::mod") {
            name = parent.to_string();
        }
        if name == "lib" || name == "main" || name == "mod" {
            name.clear();
        }
        mods.insert(name, file);
    }
    mods
}

/// The longest module named by `path` (`crate::a::b::C`, `super::x`) seen from `from`.
fn resolve(mods: &BTreeMap<String, PathBuf>, from: &str, path: &str) -> Option<String> {
    let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
    let mut base: Vec<&str> = if from.is_empty() {
        Vec::new()
    } else {
        from.split("::").collect()
    };
    match parts.first() {
        Some(&"crate") => base.clear(),
        Some(&"super") => {
            base.pop();
            while parts.get(1) == Some(&"super") {
                base.pop();
                parts.remove(0);
            }
        }
        Some(&"self") => {}
        _ => return None,
    }
    parts.remove(0);
    (1..=parts.len()).rev().find_map(|n| {
        let mut candidate = base.clone();
        candidate.extend_from_slice(&parts[..n]);
        let candidate = candidate.join("::");
        mods.contains_key(&candidate).then_some(candidate)
    })
}

/// Module → the modules its product code names.
fn edges(mods: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges = BTreeMap::new();
    for (module, file) in mods {
        let mut text = fs::read_to_string(file).unwrap();
        if let Some(cut) = text.find("#[cfg(test)]\nmod tests") {
            text.truncate(cut);
        }
        let mut out = BTreeSet::new();
        for start in ["crate::", "super::", "self::"] {
            for (at, _) in text.match_indices(start) {
                if text[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
                {
                    continue;
                }
                let path: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '{'))
                    .filter(|&c| c != '{')
                    .collect();
                if let Some(target) = resolve(mods, module, &path) {
                    let inside = module.starts_with(&format!("{target}::"));
                    if target != *module && !target.is_empty() && !inside {
                        out.insert(target);
                    }
                }
            }
        }
        edges.insert(module.clone(), out);
    }
    edges
}

/// Strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct Walk<'e> {
        edges: &'e BTreeMap<String, BTreeSet<String>>,
        index: HashMap<&'e str, usize>,
        low: HashMap<&'e str, usize>,
        stack: Vec<&'e str>,
        on_stack: BTreeSet<&'e str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'e> Walk<'e> {
        fn visit(&mut self, v: &'e str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.edges[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on_stack.remove(w);
                    component.insert(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn no_new_import_cycles_between_files() {
    let mut problems = Vec::new();
    for dir in crate_dirs() {
        let mods = modules(&root().join(&dir).join("src"));
        for cycle in cycles(&edges(&mods)) {
            let known = KNOWN_CYCLES
                .iter()
                .any(|(d, files)| *d == dir && cycle.iter().all(|m| files.contains(&m.as_str())));
            if !known {
                problems.push(format!(
                    "{dir}: {}",
                    cycle.into_iter().collect::<Vec<_>>().join(" <-> ")
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "new file-level import cycles (move what both sides need to a module they both \
         use):\n{}",
        problems.join("\n")
    );
}

/// The `memfleet-*` names in a manifest's `[dependencies]` (not dev-dependencies).
fn workspace_dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut deps = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && line.starts_with("memfleet-") {
            let name: String = line
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '-')
                .collect();
            deps.push(name);
        }
    }
    deps
}

/// Every workspace crate's (package name, normal `memfleet-*` dependencies).
fn crate_dependencies() -> Vec<(String, Vec<String>)> {
    let mut crates = Vec::new();
    for dir in crate_dirs() {
        let manifest = fs::read_to_string(root().join(&dir).join("Cargo.toml")).unwrap();
        let Some(name) = manifest
            .lines()
            .find_map(|l| l.trim().strip_prefix("name = "))
            .map(|n| n.trim_matches('"').to_string())
        else {
            continue;
        };
        crates.push((name, workspace_dependencies(&manifest)));
    }
    crates
}

#[test]
fn no_tool_crate_depends_on_another() {
    let crates = crate_dependencies();
    // The rule is checked against manifests that exist: every tool is found.
    for tool in TOOLS {
        assert!(crates.iter().any(|(n, _)| n == tool), "no crate {tool}");
    }
    let problems: Vec<String> = crates
        .iter()
        .filter(|(name, _)| TOOLS.contains(&name.as_str()))
        .flat_map(|(name, deps)| {
            deps.iter()
                .filter(|dep| TOOLS.contains(&dep.as_str()))
                .map(move |dep| format!("{name} -> {dep}"))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "tool crates depending on tool crates (start the other tool as a process, or move \
         what both need to a library crate): {problems:?}"
    );
}

#[test]
fn the_test_kit_is_no_product_crates_dependency() {
    let crates = crate_dependencies();
    assert!(crates.iter().any(|(n, _)| n == "memfleet-testkit"));
    let problems: Vec<&String> = crates
        .iter()
        .filter(|(name, deps)| {
            PRODUCT.contains(&name.as_str()) && deps.iter().any(|d| d == "memfleet-testkit")
        })
        .map(|(name, _)| name)
        .collect();
    assert!(
        problems.is_empty(),
        "product crates with memfleet-testkit as a normal dependency (make it a \
         dev-dependency): {problems:?}"
    );
}

/// The packages `memfleet` links with FEATURES (`cargo tree`'s flags), by name.
fn binary_packages(features: &[&str]) -> BTreeSet<String> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-p",
            "memfleet",
            "-e",
            "normal",
        ])
        .args(["--prefix", "none", "--format", "{p}"])
        .args(features)
        .current_dir(root())
        .output()
        .expect("cargo tree");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn the_product_binary_links_no_lab_crate() {
    let product = binary_packages(&["--no-default-features"]);
    for part in ["memfleet-server", "memfleet-router", "memfleet-invalidator"] {
        assert!(product.contains(part), "{part} missing from {product:?}");
    }
    let lab: Vec<&&str> = LAB.iter().filter(|c| product.contains(**c)).collect();
    assert!(
        lab.is_empty(),
        "the product binary (--no-default-features) links lab crates {lab:?}: make them \
         optional dependencies of the `lab` feature, or dev-dependencies"
    );
    // The check sees the lab where it is: the default (developer's) build links all of it.
    let everything = binary_packages(&[]);
    for crate_name in LAB {
        assert!(
            everything.contains(*crate_name),
            "{crate_name} not in the lab build"
        );
    }
}

fn repository_files(dir: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "node_modules") {
                repository_files(&path, out);
            }
        } else {
            out.push(
                path.strip_prefix(root())
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

/// A `CamelCase` name with at least two humps (`RouteSlot`, not `Ok` or `END`).
fn type_like(token: &str) -> bool {
    let humps = token.chars().filter(char::is_ascii_uppercase).count();
    token.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && humps >= 2
        && token.chars().any(|c| c.is_ascii_lowercase())
        && token.chars().all(|c| c.is_ascii_alphanumeric())
}

#[test]
fn architecture_doc_names_what_exists() {
    let doc = fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let mut files = Vec::new();
    repository_files(&root(), &mut files);
    let mut sources = String::new();
    for f in files.iter().filter(|f| f.ends_with(".rs")) {
        sources.push_str(&fs::read_to_string(root().join(f)).unwrap());
    }
    let mut missing = Vec::new();
    for (i, quoted) in doc.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let token = quoted.trim();
        let looks_like_path = !token.contains(' ')
            && !token.contains('*')
            && !token.contains('<')
            && !token.starts_with('-')
            && (token.ends_with(".rs") || token.ends_with(".md") || token.ends_with(".toml"));
        if looks_like_path {
            let token = token.trim_start_matches("./");
            let exists = files
                .iter()
                .any(|f| f == token || f.ends_with(&format!("/{token}")));
            if !exists {
                missing.push(format!("file {token}"));
            }
        } else if type_like(token) {
            let named = sources.match_indices(token).any(|(at, _)| {
                let before = sources[..at].chars().next_back();
                let after = sources[at + token.len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            });
            if !named {
                missing.push(format!("name {token}"));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names what the code does not have:\n{}",
        missing.join("\n")
    );
}

/// The checks above can fail: a synthetic two-file cycle is found, a one-way edge is not.
#[test]
fn the_cycle_finder_finds_cycles() {
    let graph = |pairs: &[(&str, &str)]| {
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            edges
                .entry(a.to_string())
                .or_default()
                .insert(b.to_string());
            edges.entry(b.to_string()).or_default();
        }
        edges
    };
    let found = cycles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].iter().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert!(cycles(&graph(&[("a", "b"), ("b", "c")])).is_empty());
    let mut mods = BTreeMap::new();
    for m in ["", "x", "x::y", "z"] {
        mods.insert(m.to_string(), PathBuf::new());
    }
    assert_eq!(
        resolve(&mods, "x::y", "super::super::z::Thing").as_deref(),
        Some("z")
    );
    assert_eq!(
        resolve(&mods, "z", "crate::x::y::f").as_deref(),
        Some("x::y")
    );
    assert_eq!(resolve(&mods, "z", "std::x"), None);
    assert!(type_like("RouteSlot") && !type_like("Ok") && !type_like("END"));
}

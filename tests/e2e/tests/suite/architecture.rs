//! Architecture rules that are cheaper to check than to remember.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Generated gRPC types are seen only by the proto crate and the two connection
/// modules; everything else speaks the domain types.
#[test]
fn only_the_connection_modules_use_generated_protocol_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let allowed = [
        root.join("control-plane/src/grpc.rs")
            .canonicalize()
            .unwrap(),
        root.join("worker/src/connection.rs")
            .canonicalize()
            .unwrap(),
    ];
    let mut files = Vec::new();
    rust_files(&root.join("control-plane/src"), &mut files);
    rust_files(&root.join("worker/src"), &mut files);
    assert!(
        files.len() > 10,
        "source tree not found from {}",
        root.display()
    );
    let mut offenders = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        if text.contains("chorus_proto::wire") && !allowed.contains(&file.canonicalize().unwrap()) {
            offenders.push(file);
        }
    }
    assert!(
        offenders.is_empty(),
        "generated protocol types used in {offenders:?}"
    );
}

/// The anchor GitHub gives a heading: lower case, punctuation but `-` and `_` dropped,
/// spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every link of a Markdown file: the targets of `[text](target)`.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            targets.push(rest[..end].trim().to_string());
        }
    }
    targets
}

/// A newcomer's first page has no dead links: every relative link of README.md (and
/// deploy/README.md) names a file or directory inside the repository, every `#anchor`
/// a heading of its file, and no path in backticks points out of the repository.
#[test]
fn every_relative_link_in_the_readmes_resolves_inside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap();
    let mut problems = Vec::new();
    let mut checked = 0;
    for readme in ["README.md", "deploy/README.md"] {
        let path = root.join(readme);
        let text = std::fs::read_to_string(&path).unwrap();
        let dir = path.parent().unwrap().to_path_buf();
        let headings = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with('#'))
                .map(|l| anchor(l.trim_start_matches('#')))
                .collect()
        };
        for target in link_targets(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            checked += 1;
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target.as_str(), None),
            };
            let resolved = if file.is_empty() {
                path.clone()
            } else {
                match dir.join(file).canonicalize() {
                    Ok(p) if p.starts_with(&root) => p,
                    Ok(p) => {
                        problems.push(format!(
                            "{readme}: {target} is outside the repository ({})",
                            p.display()
                        ));
                        continue;
                    }
                    Err(e) => {
                        problems.push(format!("{readme}: {target} does not exist ({e})"));
                        continue;
                    }
                }
            };
            if let Some(fragment) = fragment {
                let text = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !headings(&text).iter().any(|h| h == fragment) {
                    problems.push(format!(
                        "{readme}: no heading for #{fragment} in {}",
                        resolved.display()
                    ));
                }
            }
        }
        for (i, span) in text.split('`').enumerate() {
            if i % 2 == 1 && span.starts_with("../") {
                match dir.join(span).canonicalize() {
                    Ok(p) if p.starts_with(&root) => {}
                    _ => problems.push(format!("{readme}: `{span}` points out of the repository")),
                }
            }
        }
    }
    assert!(checked >= 5, "only {checked} relative links found");
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn headings_become_the_anchors_github_gives_them() {
    assert_eq!(
        anchor(" Dial-in workers (containers, Kubernetes)"),
        "dial-in-workers-containers-kubernetes"
    );
    assert_eq!(anchor("Deploying (`deploy/`)"), "deploying-deploy");
    assert_eq!(
        link_targets("see [a](b.md#c) and [d](#e)"),
        ["b.md#c", "#e"]
    );
}

/// A crate's modules as units (`config`, `store/threads`, the worker's `tool_loop`)
/// and which units each one uses (`crate::…` and `super::…` paths in non-test
/// code; a module and its own submodules do not count as using each other).
fn module_graph(
    src: &Path,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let unit_of = |file: &Path| -> String {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let rel = rel.to_string_lossy().replace('\\', "/");
        rel.strip_suffix("/mod").unwrap_or(&rel).to_string()
    };
    let units: BTreeSet<String> = files.iter().map(|f| unit_of(f)).collect();
    let related = |a: &str, b: &str| {
        a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"))
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy();
        if name == "main.rs"
            || name == "lib.rs"
            || name == "tests.rs"
            || name.ends_with("_tests.rs")
        {
            continue;
        }
        let from = unit_of(file);
        let text = std::fs::read_to_string(file).unwrap();
        // Unit tests at the end of a file may use anything.
        let code = text.split("#[cfg(test)]\nmod ").next().unwrap();
        let code: String = code
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let parent = from.rsplit_once('/').map(|(p, _)| p.to_string());
        let mut targets = Vec::new();
        let idents = |rest: &str| -> Vec<String> {
            // `a::b`, or the names of a `{a, b::c}` group.
            let rest = rest.trim_start();
            if let Some(group) = rest.strip_prefix('{') {
                let group = group.split('}').next().unwrap_or("");
                group
                    .split(',')
                    .map(|part| part.trim().to_string())
                    .filter(|part| !part.is_empty())
                    .collect()
            } else {
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                vec![rest[..end].to_string()]
            }
        };
        for (i, _) in code.match_indices("crate::") {
            for path in idents(&code[i + "crate::".len()..]) {
                let segments: Vec<&str> = path.split("::").collect();
                let deep = segments
                    .iter()
                    .take(2)
                    .copied()
                    .collect::<Vec<_>>()
                    .join("/");
                if units.contains(&deep) {
                    targets.push(deep);
                } else if units.contains(segments[0]) {
                    targets.push(segments[0].to_string());
                }
            }
        }
        if let Some(parent) = &parent {
            for (i, _) in code.match_indices("super::") {
                for path in idents(&code[i + "super::".len()..]) {
                    let first = path.split("::").next().unwrap_or("");
                    let sibling = format!("{parent}/{first}");
                    if units.contains(&sibling) {
                        targets.push(sibling);
                    }
                }
            }
        }
        for to in targets {
            if !related(&from, &to) {
                graph.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    graph
}

/// The groups of modules that use each other in a circle (Tarjan's strongly
/// connected components with more than one member).
fn import_circles(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Vec<Vec<String>> {
    use std::collections::HashMap;
    struct Walk<'a> {
        graph: &'a std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        circles: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut circle = Vec::new();
                while let Some(w) = self.stack.pop() {
                    circle.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if circle.len() > 1 {
                    circle.sort();
                    self.circles.push(circle);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        circles: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.circles
}

/// No two modules of a crate use each other, directly or round a circle: a circle
/// is where a change in one place breaks another that looked unrelated. A module
/// is a file (`store/threads`); a directory's `mod.rs` and its files do not count.
#[test]
fn modules_use_each_other_in_no_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for krate in ["control-plane/src", "worker/src"] {
        let graph = module_graph(&root.join(krate));
        assert!(graph.len() > 5, "no modules found in {krate}");
        let circles = import_circles(&graph);
        assert!(
            circles.is_empty(),
            "modules of {krate} that use each other in a circle: {circles:?}"
        );
    }
}

/// The check above finds a circle where there is one.
#[test]
fn an_import_circle_is_found() {
    use std::collections::{BTreeMap, BTreeSet};
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(str::to_string).collect()))
    .collect();
    assert_eq!(import_circles(&graph), vec![vec!["a", "b", "c"]]);
}

/// The gate depends on the permission engine and its policy helpers (`profiles`,
/// `grants`), on `questions` and on `principal`, never the reverse: no import cycle.
#[test]
fn the_permission_engine_questions_and_principals_use_nothing_of_the_gate() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../control-plane/src");
    let mut files = Vec::new();
    rust_files(&src.join("permissions"), &mut files);
    rust_files(&src.join("questions"), &mut files);
    files.push(src.join("principal.rs"));
    assert!(
        files.len() > 5,
        "source tree not found from {}",
        src.display()
    );
    let offenders: Vec<_> = files
        .into_iter()
        .filter(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            text.contains("crate::gate") || text.contains("chorus_control_plane::gate")
        })
        .collect();
    assert!(offenders.is_empty(), "the gate used in {offenders:?}");
}

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

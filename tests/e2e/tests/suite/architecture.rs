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

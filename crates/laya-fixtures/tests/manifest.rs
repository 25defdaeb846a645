//! The fixtures in `data/` are exactly the files `data/MANIFEST.sha256` lists (regen.py writes
//! it): nothing missing, nothing changed, nothing unlisted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// Every file under the listed top-level folders, relative to `root`.
fn files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files(root, &path, out);
        } else {
            let rel = path.strip_prefix(root).expect("under the root");
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

#[test]
fn committed_fixtures_match_their_manifest() {
    let root = data();
    let text = std::fs::read_to_string(root.join("MANIFEST.sha256")).expect("MANIFEST.sha256");
    let listed: BTreeMap<&str, &str> = text
        .lines()
        .map(|l| {
            let (hash, path) = l.split_once("  ").expect("`<sha256>  <path>` lines");
            (path, hash)
        })
        .collect();
    assert!(listed.len() > 40, "only {} files listed", listed.len());
    let mut present = Vec::new();
    for top in [
        "checkpoint-configs",
        "checkpoints",
        "references",
        "tokenizers",
        "workloads",
    ] {
        files(&root, &root.join(top), &mut present);
    }
    present.sort();
    let unlisted: Vec<&String> = present
        .iter()
        .filter(|p| !listed.contains_key(p.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "files not in the manifest: {unlisted:?}"
    );
    for (path, want) in &listed {
        let bytes = std::fs::read(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        let got: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(&got, want, "{path} differs from the manifest");
    }
}

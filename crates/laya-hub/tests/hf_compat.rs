//! The cache is shared with huggingface_hub (pip), both ways: what we pull it reads back
//! with `HF_HUB_OFFLINE=1` (and `scan_cache_dir` finds nothing wrong); what it downloads
//! from the mock hub we resolve offline. The second direction also shows the mock speaks
//! the hub's protocol as huggingface_hub expects it.

use std::collections::BTreeMap;

use laya_hub::{Hub, NoProgress};

use crate::support::python::{python, run};
use crate::support::{assert_checkpoint, sha256_hex, Env, OTHER_MAIN, PIN};

const READ_BACK: &str = r#"
import hashlib, json, os
from huggingface_hub import hf_hub_download, scan_cache_dir, snapshot_download
pin, files = os.environ["PIN"], json.loads(os.environ["FILES"])
out = {
    "tiny": snapshot_download("laya-test/tiny", revision=pin),
    "tiny_sha256": {
        f: hashlib.sha256(open(hf_hub_download("laya-test/tiny", f, revision=pin), "rb").read()).hexdigest()
        for f in files
    },
    "other": snapshot_download("laya-test/other"),
}
info = scan_cache_dir()
out["warnings"] = [str(w) for w in info.warnings]
out["repos"] = {
    r.repo_id: sorted([rv.commit_hash, sorted(rv.refs), rv.nb_files, rv.size_on_disk] for rv in r.revisions)
    for r in info.repos
}
print(json.dumps(out))
"#;

#[test]
fn huggingface_hub_reads_what_we_pull() {
    let Some(py) = python() else { return };
    let env = Env::new();
    let h = Hub::new(env.config()).unwrap_or_else(|e| panic!("{e}"));
    let tiny = h
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    let other = h
        .pull("laya-test/other", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));

    let files: Vec<&String> = env.fx.files.keys().collect();
    let files_json = serde_json::to_string(&files).unwrap_or_default();
    let cache = env.cache_dir().display().to_string();
    let stdout = run(
        &py,
        READ_BACK,
        &[
            ("HF_HUB_CACHE", &cache),
            ("HF_HUB_OFFLINE", "1"),
            ("PIN", PIN),
            ("FILES", &files_json),
        ],
    );
    let out: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));

    assert_eq!(out["tiny"].as_str(), tiny.dir.to_str());
    assert_eq!(out["other"].as_str(), other.dir.to_str());
    let want: BTreeMap<&String, String> = env
        .fx
        .files
        .iter()
        .map(|(p, b)| (p, sha256_hex(b)))
        .collect();
    assert_eq!(
        out["tiny_sha256"],
        serde_json::to_value(&want).unwrap_or_default()
    );
    assert_eq!(
        out["warnings"],
        serde_json::json!([]),
        "scan_cache_dir found problems"
    );
    let size: u64 = env.fx.files.values().map(|b| b.len() as u64).sum();
    assert_eq!(
        out["repos"],
        serde_json::json!({
            "laya-test/tiny": [[PIN, [], 5, size]],
            "laya-test/other": [[OTHER_MAIN, ["main"], 5, size]],
        })
    );
}

const DOWNLOAD: &str = r#"
import json, os
from huggingface_hub import hf_hub_download
for f in json.loads(os.environ["FILES"]):
    hf_hub_download("laya-test/tiny", f, revision=os.environ["PIN"])
"#;

#[test]
fn we_read_what_huggingface_hub_downloads() {
    let Some(py) = python() else { return };
    let env = Env::new();
    let files: Vec<&String> = env.fx.files.keys().collect();
    let files_json = serde_json::to_string(&files).unwrap_or_default();
    let cache = env.cache_dir().display().to_string();
    let endpoint = env.mock.endpoint();
    run(
        &py,
        DOWNLOAD,
        &[
            ("HF_HUB_CACHE", &cache),
            ("HF_ENDPOINT", &endpoint),
            ("PIN", PIN),
            ("FILES", &files_json),
        ],
    );
    assert!(env
        .mock
        .cdn
        .log()
        .iter()
        .any(|r| r.target.contains("model.safetensors")));

    let mut c = env.config();
    c.offline = true;
    let h = Hub::new(c).unwrap_or_else(|e| panic!("{e}"));
    let m = h
        .resolve("tiny", None, true, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.dir, env.snapshot("laya-test/tiny", PIN));
    assert_checkpoint(&m.dir, &env.fx.files);
    // An offline pull re-hashes huggingface_hub's blobs against our pins.
    h.pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    let listed = h.list();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].complete && listed[0].pinned);
}

//! Test support: the fixture checkpoint (copied to a temp dir at test time), a model table
//! pinned to it, a mock hub serving it, and a Python with huggingface_hub.

pub mod mock;
pub mod python;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use laya_hub::{Digest, HubConfig, KnownModel, ModelTable, PinnedFile, CHECKPOINT_FILES};
use sha1::Sha1;
use sha2::{Digest as _, Sha256};
use tempfile::TempDir;

use mock::{is_lfs, MockHub, MockRepo};

/// The commit the test table pins `tiny` (and `private`) to.
pub const PIN: &str = "c0ffee0000000000000000000000000000000001";
/// Another commit of `laya-test/tiny` (different `rl_agent_config.json`).
pub const OTHER: &str = "beef000000000000000000000000000000000002";
/// `main` of the unpinned repo `laya-test/other`.
pub const OTHER_MAIN: &str = "dada000000000000000000000000000000000003";
/// The token private repos need.
pub const TOKEN: &str = "hf_testtoken123";

pub use laya_fixtures::fixtures_dir;

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `git hash-object`: sha1 of `"blob <len>\0"` + bytes.
pub fn git_blob_id(bytes: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    hex(&h.finalize())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The digest a file is pinned by: sha256 for the files the mock serves as LFS, git blob id
/// for the rest (as model.md §1.2 does for the real checkpoints).
pub fn digest_for(path: &str, bytes: &[u8]) -> Digest {
    if is_lfs(path) {
        Digest::Sha256(sha256_hex(bytes))
    } else {
        Digest::GitBlobSha1(git_blob_id(bytes))
    }
}

/// The tiny checkpoint, copied into a temp dir (never into the repo).
pub struct Fixture {
    pub dir: TempDir,
    pub files: BTreeMap<String, Vec<u8>>,
}

impl Fixture {
    pub fn new() -> Fixture {
        let src = fixtures_dir().join("checkpoints/tiny");
        let dir = tempfile::tempdir().expect("temp dir");
        let mut files = BTreeMap::new();
        for path in CHECKPOINT_FILES {
            let bytes = std::fs::read(src.join(path))
                .unwrap_or_else(|e| panic!("{}: {e}", src.join(path).display()));
            let dst = dir.path().join(path);
            std::fs::create_dir_all(dst.parent().expect("parent")).expect("mkdir");
            std::fs::write(&dst, &bytes).expect("write fixture copy");
            files.insert(path.to_owned(), bytes);
        }
        Fixture { dir, files }
    }

    /// The files of commit `OTHER`: the same but for a changed `rl_agent_config.json`.
    pub fn other_files(&self) -> BTreeMap<String, Vec<u8>> {
        let mut files = self.files.clone();
        let cfg = files.get_mut("rl_agent_config.json").expect("config");
        cfg.extend_from_slice(b"\n");
        files
    }

    pub fn pinned(&self, name: &str, repo: &str) -> KnownModel {
        KnownModel {
            name: name.to_owned(),
            aliases: vec![format!("{name}-alias")],
            repo: repo.to_owned(),
            revision: PIN.to_owned(),
            files: self
                .files
                .iter()
                .map(|(path, bytes)| PinnedFile {
                    path: path.clone(),
                    size: bytes.len() as u64,
                    digest: digest_for(path, bytes),
                })
                .collect(),
        }
    }

    /// `tiny` (laya-test/tiny, default) and `private` (laya-test/private), pinned to `PIN`.
    pub fn table(&self) -> ModelTable {
        ModelTable::new(
            vec![
                self.pinned("tiny", "laya-test/tiny"),
                self.pinned("private", "laya-test/private"),
            ],
            "tiny",
        )
        .expect("test table")
    }
}

/// A fixture, a mock hub serving it and an empty cache.
pub struct Env {
    pub fx: Fixture,
    pub mock: MockHub,
    pub home: TempDir,
}

impl Env {
    pub fn new() -> Env {
        let fx = Fixture::new();
        let mut tiny = MockRepo::new(PIN, fx.files.clone());
        tiny.commits.insert(OTHER.to_owned(), fx.other_files());
        let mut private = MockRepo::new(PIN, fx.files.clone());
        private.private = true;
        let mut incomplete = fx.files.clone();
        incomplete.remove("encoder/config.json");
        let repos = HashMap::from([
            ("laya-test/tiny".to_owned(), tiny),
            ("laya-test/private".to_owned(), private),
            (
                "laya-test/other".to_owned(),
                MockRepo::new(OTHER_MAIN, fx.files.clone()),
            ),
            (
                "laya-test/incomplete".to_owned(),
                MockRepo::new(PIN, incomplete),
            ),
        ]);
        let mock = MockHub::start(repos, TOKEN);
        Env {
            fx,
            mock,
            home: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn cache_dir(&self) -> PathBuf {
        self.home.path().join("hub")
    }

    /// Test defaults: the mock endpoint, no token, no retries, short timeouts.
    pub fn config(&self) -> HubConfig {
        let mut c = HubConfig::new(self.cache_dir());
        c.endpoint = self.mock.endpoint();
        c.models = self.fx.table();
        c.read_timeout = Duration::from_secs(5);
        c.connect_timeout = Duration::from_secs(5);
        c.retries = 0;
        c.retry_delay = Duration::from_millis(50);
        c
    }

    pub fn repo_dir(&self, repo: &str) -> PathBuf {
        self.cache_dir()
            .join(format!("models--{}", repo.replace('/', "--")))
    }

    pub fn snapshot(&self, repo: &str, commit: &str) -> PathBuf {
        self.repo_dir(repo).join("snapshots").join(commit)
    }
}

/// Names in `dir`, sorted (empty when it does not exist).
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Asserts `dir` holds exactly the fixture's checkpoint files, byte for byte.
pub fn assert_checkpoint(dir: &Path, files: &BTreeMap<String, Vec<u8>>) {
    for (path, want) in files {
        let got = std::fs::read(dir.join(path))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join(path).display()));
        assert!(
            got == *want,
            "{} differs from the fixture",
            dir.join(path).display()
        );
    }
}

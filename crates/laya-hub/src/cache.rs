//! The Hugging Face cache layout, so `huggingface_hub` (and so `laya`) and sys1rust share
//! one copy of every file:
//!
//! ```text
//! <hub>/models--<org>--<name>/blobs/<etag>             content, named by sha256 (LFS) or git blob id
//! <hub>/models--<org>--<name>/blobs/<etag>.incomplete  a download in progress (resumable)
//! <hub>/models--<org>--<name>/snapshots/<commit>/<path>  relative symlink to ../../blobs/<etag>
//! <hub>/models--<org>--<name>/refs/<branch>           the commit a branch was last resolved to
//! <hub>/.locks/models--<org>--<name>/<etag>.lock       huggingface_hub's per-blob lock
//! ```
//!
//! A file appears under `snapshots/` only after its blob was verified, so whatever a snapshot
//! shows is good; completeness is checked by looking at the links (see [`RepoCache::has_file`]).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::HubError;
use crate::models::Digest;
use crate::spec::{check_revision, is_commit_prefix};

/// Paths of one repo inside the hub cache.
#[derive(Debug, Clone)]
pub(crate) struct RepoCache {
    hub: PathBuf,
    root: PathBuf,
    folder: String,
}

impl RepoCache {
    /// `repo` must be a checked repo id (`repo_id::is_repo_id`).
    pub(crate) fn new(hub: &Path, repo: &str) -> RepoCache {
        let folder = format!("models--{}", repo.replace('/', "--"));
        RepoCache {
            hub: hub.to_path_buf(),
            root: hub.join(&folder),
            folder,
        }
    }

    /// The repo id of a `models--org--name` folder (as huggingface_hub's `scan_cache_dir` reads it).
    pub(crate) fn repo_of_folder(folder: &str) -> Option<String> {
        let rest = folder.strip_prefix("models--")?;
        let repo = rest.split("--").collect::<Vec<_>>().join("/");
        (!repo.is_empty()).then_some(repo)
    }

    /// `<hub>/models--org--name`: everything cached of the repo (the locks live elsewhere).
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn blobs(&self) -> PathBuf {
        self.root.join("blobs")
    }

    pub(crate) fn blob(&self, digest: &Digest) -> PathBuf {
        self.blobs().join(digest.hex())
    }

    pub(crate) fn incomplete(&self, digest: &Digest) -> PathBuf {
        self.blobs().join(format!("{}.incomplete", digest.hex()))
    }

    /// Bytes of `digest` on disk: its blob's size, else its partial download's, else `None`.
    pub(crate) fn bytes_of(&self, digest: &Digest) -> Option<u64> {
        let len = |p: PathBuf| std::fs::metadata(p).ok().map(|m| m.len());
        len(self.blob(digest)).or_else(|| len(self.incomplete(digest)))
    }

    pub(crate) fn snapshot_dir(&self, commit: &str) -> PathBuf {
        self.root.join("snapshots").join(commit)
    }

    /// `path` is `/`-separated and checked safe (`models::is_safe_relative_path`).
    pub(crate) fn snapshot_file(&self, commit: &str, path: &str) -> PathBuf {
        path.split('/')
            .fold(self.snapshot_dir(commit), |p, seg| p.join(seg))
    }

    /// `<hub>/.locks/models--org--name/`, where huggingface_hub keeps its lock files.
    pub(crate) fn locks_dir(&self) -> PathBuf {
        self.hub.join(".locks").join(&self.folder)
    }

    /// The commit `refs/<name>` points at, if it is there and well formed.
    pub(crate) fn read_ref(&self, name: &str) -> Option<String> {
        // Callers check revisions first; refusing here too keeps `..` from ever leaving refs/.
        check_revision(name).ok()?;
        let text = fs::read_to_string(self.ref_path(name)).ok()?;
        let commit = text.trim();
        (commit.len() == 40 && is_commit_prefix(commit)).then(|| commit.to_owned())
    }

    /// Points `refs/<name>` at `commit` (written to a temp file and renamed, so readers never
    /// see half a hash). No trailing newline, as huggingface_hub writes it.
    pub(crate) fn write_ref(&self, name: &str, commit: &str) -> Result<(), HubError> {
        check_revision(name)?;
        let path = self.ref_path(name);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(HubError::io("create", dir))?;
        }
        let tmp = temp_sibling(&path);
        fs::write(&tmp, commit).map_err(HubError::io("write", &tmp))?;
        fs::rename(&tmp, &path).map_err(HubError::io("rename", &path))
    }

    fn ref_path(&self, name: &str) -> PathBuf {
        // `name` passed spec::check_revision: no `..`, no leading `/`.
        name.split('/')
            .fold(self.root.join("refs"), |p, seg| p.join(seg))
    }

    /// Commits that have a snapshot folder, sorted.
    pub(crate) fn snapshots(&self) -> Vec<String> {
        let Ok(rd) = fs::read_dir(self.root.join("snapshots")) else {
            return Vec::new();
        };
        let mut out: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        out.sort();
        out
    }

    /// The cached snapshot whose commit starts with `prefix`, if exactly one does.
    pub(crate) fn find_snapshot(
        &self,
        repo: &str,
        prefix: &str,
    ) -> Result<Option<String>, HubError> {
        let hits: Vec<String> = self
            .snapshots()
            .into_iter()
            .filter(|c| c.starts_with(prefix))
            .collect();
        match hits.len() {
            0 => Ok(None),
            1 => Ok(hits.into_iter().next()),
            _ => Err(HubError::AmbiguousRevision {
                repo: repo.to_owned(),
                revision: prefix.to_owned(),
                candidates: hits.join(", "),
            }),
        }
    }

    /// Whether `snapshots/<commit>/<path>` resolves to a file, and, when `expected` is given,
    /// whether it has that size and (when it is a link) points at the blob of that digest.
    pub(crate) fn has_file(
        &self,
        commit: &str,
        path: &str,
        expected: Option<(&Digest, u64)>,
    ) -> bool {
        let file = self.snapshot_file(commit, path);
        let Ok(meta) = fs::metadata(&file) else {
            return false;
        };
        if !meta.is_file() {
            return false;
        }
        let Some((digest, size)) = expected else {
            return true;
        };
        if meta.len() != size {
            return false;
        }
        match fs::read_link(&file) {
            Ok(target) => target.file_name().and_then(|n| n.to_str()) == Some(digest.hex()),
            // A plain file (a copy where symlinks are unavailable): the size has to do.
            Err(_) => true,
        }
    }

    /// Makes `snapshots/<commit>/<path>` a relative symlink to `blobs/<digest>` (replacing what
    /// was there atomically: a temp link renamed over it). Where symlinks are unavailable the
    /// blob is copied, as huggingface_hub does on Windows without developer mode.
    pub(crate) fn link(&self, commit: &str, path: &str, digest: &Digest) -> Result<(), HubError> {
        let dst = self.snapshot_file(commit, path);
        let parent = dst.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&parent).map_err(HubError::io("create", &parent))?;
        let tmp = temp_sibling(&dst);
        // snapshots/<commit>/a/b -> ../../../blobs/<digest>: one `..` per path segment plus
        // one for the commit folder and one for `snapshots`.
        let depth = path.split('/').count() + 1;
        let mut target = PathBuf::new();
        for _ in 0..depth {
            target.push("..");
        }
        target.push("blobs");
        target.push(digest.hex());
        make_link(&target, &self.blob(digest), &tmp)?;
        fs::rename(&tmp, &dst).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            HubError::io("rename", &dst)(e)
        })
    }
}

#[cfg(unix)]
fn make_link(relative_target: &Path, _blob: &Path, at: &Path) -> Result<(), HubError> {
    std::os::unix::fs::symlink(relative_target, at).map_err(HubError::io("create symlink", at))
}

#[cfg(not(unix))]
fn make_link(_relative_target: &Path, blob: &Path, at: &Path) -> Result<(), HubError> {
    fs::copy(blob, at)
        .map(|_| ())
        .map_err(HubError::io("copy blob to", at))
}

/// A unique name next to `path` for write-then-rename.
pub(crate) fn temp_sibling(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    path.with_file_name(format!(".{name}.{}-{n}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_names() {
        let c = RepoCache::new(Path::new("/hub"), "org/name");
        assert_eq!(
            c.snapshot_dir("abc"),
            Path::new("/hub/models--org--name/snapshots/abc")
        );
        assert_eq!(
            RepoCache::repo_of_folder("models--org--name").as_deref(),
            Some("org/name")
        );
        assert_eq!(RepoCache::repo_of_folder("datasets--a--b"), None);
        assert_eq!(
            c.snapshot_file("abc", "tokenizer/tokenizer.json"),
            Path::new("/hub/models--org--name/snapshots/abc/tokenizer/tokenizer.json")
        );
    }
}

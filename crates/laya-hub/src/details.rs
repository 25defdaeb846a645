//! `sys1rust show`: one model's pin, files and where they are, read from the model table and
//! the cache only (never the network).

use std::fs;
use std::path::{Path, PathBuf};

use crate::cache::RepoCache;
use crate::error::HubError;
use crate::models::{Digest, KnownModel, CHECKPOINT_FILES};
use crate::spec::{check_revision, is_commit_prefix, ModelSpec};
use crate::Hub;

/// What `show` reports of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDetails {
    /// The model's name (a repo id or directory when it is not in the model table).
    pub name: String,
    /// Other names it answers to.
    pub aliases: Vec<String>,
    /// Hugging Face repo id; `None` for a local directory.
    pub repo: Option<String>,
    /// Full commit; `None` for a local directory.
    pub revision: Option<String>,
    /// Whether this is the model table's pinned revision.
    pub pinned: bool,
    /// The snapshot directory (or the local directory), whether or not it exists yet.
    pub path: PathBuf,
    /// Every file a checkpoint needs, in the order they are pulled.
    pub files: Vec<FileDetails>,
}

impl ModelDetails {
    /// Whether every file is there (and, for a pin, at its pinned size and hash).
    pub fn complete(&self) -> bool {
        self.files.iter().all(|f| f.state == FileState::Cached)
    }
}

/// One file of [`ModelDetails`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDetails {
    /// Path inside the checkpoint.
    pub path: String,
    /// The pinned size; else the size on disk, when there.
    pub size: Option<u64>,
    /// The pinned digest; else the one the cached blob is named by.
    pub digest: Option<Digest>,
    /// Bytes on disk (a partial download counts what has arrived).
    pub on_disk: u64,
    /// Whether it is there.
    pub state: FileState,
}

/// Whether a file of [`ModelDetails`] is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    /// Linked into the snapshot (pinned: with the pinned size and hash).
    Cached,
    /// Partly downloaded, or downloaded but not yet verified and linked.
    Partial,
    /// Not there.
    Missing,
}

impl FileState {
    /// `cached`, `partial`, `missing`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileState::Cached => "cached",
            FileState::Partial => "partial",
            FileState::Missing => "missing",
        }
    }
}

impl Hub {
    /// What `spec` (at `revision`, default the pin or `main`) is and what of it is cached.
    /// A known model is shown even when nothing is cached; a repo id needs a cached snapshot
    /// (nothing else says what its revision is), else the error says how to pull it.
    pub fn show(&self, spec: &str, revision: Option<&str>) -> Result<ModelDetails, HubError> {
        // As resolve and pull check it: a branch name becomes a path under refs/, and an
        // empty one would make the suggested pull command fail.
        if let Some(r) = revision {
            check_revision(r)?;
        }
        let cache_dir = &self.config().cache_dir;
        match (self.parse(spec)?, revision) {
            (ModelSpec::Local(dir), Some(r)) => Err(HubError::RevisionForLocal {
                revision: r.to_owned(),
                dir,
            }),
            (ModelSpec::Local(dir), None) => Ok(ModelDetails {
                name: dir.display().to_string(),
                aliases: Vec::new(),
                repo: None,
                revision: None,
                pinned: false,
                files: CHECKPOINT_FILES
                    .iter()
                    .map(|p| on_disk(p, &dir.join(p), None))
                    .collect(),
                path: dir,
            }),
            (ModelSpec::Known(m), _)
                if revision.is_none_or(|r| is_commit_prefix(r) && m.revision.starts_with(r)) =>
            {
                Ok(pinned(&RepoCache::new(cache_dir, &m.repo), &m))
            }
            (ModelSpec::Known(m), _) => {
                let mut d = self.cached_revision(spec, &m.repo, revision.unwrap_or("main"))?;
                d.name = m.name;
                d.aliases = m.aliases;
                Ok(d)
            }
            (ModelSpec::Repo(repo), _) => {
                self.cached_revision(spec, &repo, revision.unwrap_or("main"))
            }
        }
    }

    fn cached_revision(
        &self,
        spec: &str,
        repo: &str,
        revision: &str,
    ) -> Result<ModelDetails, HubError> {
        let cache = RepoCache::new(&self.config().cache_dir, repo);
        let commit = if is_commit_prefix(revision) {
            cache.find_snapshot(repo, revision)?
        } else {
            cache.read_ref(revision)
        };
        let Some(commit) = commit else {
            return Err(HubError::NotPulled {
                what: format!("{spec} at revision {revision}"),
                cache: self.config().cache_dir.clone(),
                pull_args: format!("{spec} --revision {revision}"),
            });
        };
        let dir = cache.snapshot_dir(&commit);
        let files = CHECKPOINT_FILES
            .iter()
            .map(|p| {
                let link = dir.join(p);
                // The blob a snapshot file links to is named by its digest.
                let digest = fs::read_link(&link).ok().and_then(|t| {
                    t.file_name()
                        .and_then(|n| n.to_str())
                        .and_then(Digest::parse)
                });
                on_disk(p, &link, digest)
            })
            .collect();
        Ok(ModelDetails {
            name: repo.to_owned(),
            aliases: Vec::new(),
            repo: Some(repo.to_owned()),
            revision: Some(commit),
            pinned: false,
            path: dir,
            files,
        })
    }
}

fn on_disk(path: &str, file: &Path, digest: Option<Digest>) -> FileDetails {
    let size = fs::metadata(file)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    FileDetails {
        path: path.to_owned(),
        size,
        digest,
        on_disk: size.unwrap_or(0),
        state: if size.is_some() {
            FileState::Cached
        } else {
            FileState::Missing
        },
    }
}

fn pinned(cache: &RepoCache, m: &KnownModel) -> ModelDetails {
    let files = m
        .files
        .iter()
        .map(|f| {
            let (state, on_disk) =
                if cache.has_file(&m.revision, &f.path, Some((&f.digest, f.size))) {
                    (FileState::Cached, f.size)
                } else {
                    match cache.bytes_of(&f.digest) {
                        Some(n) => (FileState::Partial, n),
                        None => (FileState::Missing, 0),
                    }
                };
            FileDetails {
                path: f.path.clone(),
                size: Some(f.size),
                digest: Some(f.digest.clone()),
                on_disk,
                state,
            }
        })
        .collect();
    ModelDetails {
        name: m.name.clone(),
        aliases: m.aliases.clone(),
        repo: Some(m.repo.clone()),
        revision: Some(m.revision.clone()),
        pinned: true,
        path: cache.snapshot_dir(&m.revision),
        files,
    }
}

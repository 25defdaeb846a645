//! [`Hub`]: turns a `--model` / `--revision` pair into a checkpoint directory, from the cache
//! when it is there (offline-first), downloading and verifying otherwise.
//!
//! Pinned models (the table's name at its pinned revision) are checked against the table's
//! sizes and hashes. Anything else (another revision, another repo) is checked against the
//! hashes the hub states for it (`X-Linked-Etag` = sha256 for LFS files, `ETag` = git blob id
//! for the rest); a file without a usable hash is refused rather than trusted.

use std::fs;
use std::path::{Path, PathBuf};

use crate::cache::RepoCache;
use crate::config::HubConfig;
use crate::download::{shown, Client};
use crate::error::HubError;
use crate::list::CachedModel;
use crate::lock::{lock_blob, lock_repo, InUse};
use crate::models::{Digest, KnownModel, ModelTable, CHECKPOINT_FILES};
use crate::progress::Progress;
use crate::spec::{check_revision, is_commit_prefix, ModelSpec};
use crate::verify::hash_file;

/// A checkpoint directory ready to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// The directory holding `rl_agent_config.json`, `model.safetensors`, `encoder/`,
    /// `tokenizer/` (a cache snapshot, or the local directory given).
    pub dir: PathBuf,
    /// The model name, the repo id for other repos, or the directory as given.
    pub name: String,
    /// Repo id; `None` for a local directory.
    pub repo: Option<String>,
    /// Full commit; `None` for a local directory.
    pub revision: Option<String>,
    /// Whether the files were checked against the model table's pin.
    pub pinned: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Use the cache when complete; download only what is missing (unless offline).
    Resolve { offline: bool },
    /// Download what is missing, re-hash what is cached, refresh branch refs.
    Pull,
}

/// Model resolution against one cache and one hub.
pub struct Hub {
    config: HubConfig,
    client: Client,
}

impl Hub {
    /// Checks the endpoint and builds the HTTP client.
    pub fn new(config: HubConfig) -> Result<Hub, HubError> {
        let client = Client::new(&config)?;
        Ok(Hub { config, client })
    }

    /// [`Hub::new`] over [`HubConfig::from_env`].
    pub fn from_env() -> Result<Hub, HubError> {
        Hub::new(HubConfig::from_env()?)
    }

    /// The configuration in use.
    pub fn config(&self) -> &HubConfig {
        &self.config
    }

    /// The hub cache directory.
    pub fn cache_dir(&self) -> &Path {
        &self.config.cache_dir
    }

    /// The models known by name.
    pub fn models(&self) -> &ModelTable {
        &self.config.models
    }

    /// What the cache holds (see [`CachedModel`] for what is listed and in which order).
    pub fn list(&self) -> Vec<CachedModel> {
        crate::list::list(&self.config.cache_dir, &self.config.models)
    }

    /// Marks a resolved model's repo as served (see [`InUse`]); `None` for a local directory.
    pub fn hold(&self, resolved: &ResolvedModel) -> Result<Option<InUse>, HubError> {
        match &resolved.repo {
            Some(repo) => {
                crate::lock::hold_in_use(&RepoCache::new(&self.config.cache_dir, repo)).map(Some)
            }
            None => Ok(None),
        }
    }

    /// `sys1rust rm`: deletes every cached revision of what `spec` names, unless a server
    /// holds it ([`Hub::hold`]) or a pull is writing it. Returns the repo folder removed and
    /// the bytes it held.
    pub fn remove(&self, spec: &str) -> Result<(PathBuf, u64), HubError> {
        let repo = match self.parse(spec)? {
            ModelSpec::Known(m) => m.repo,
            ModelSpec::Repo(r) => r,
            ModelSpec::Local(dir) => return Err(HubError::NotInCache(dir)),
        };
        let cache = RepoCache::new(&self.config.cache_dir, &repo);
        let root = cache.root().to_path_buf();
        if !root.is_dir() {
            return Err(HubError::NothingCached {
                name: spec.to_owned(),
                path: root,
            });
        }
        let in_use = |by| HubError::InUse {
            name: spec.to_owned(),
            by,
        };
        let _unused =
            crate::lock::claim_unused(&cache)?.ok_or_else(|| in_use("a running server"))?;
        let _no_pull = crate::lock::claim_repo(&cache)?.ok_or_else(|| in_use("a download"))?;
        let bytes = dir_size(&root.join("blobs"));
        fs::remove_dir_all(&root).map_err(HubError::io("remove", &root))?;
        Ok((root, bytes))
    }

    /// What `spec` names (see [`ModelSpec::parse`]).
    pub fn parse(&self, spec: &str) -> Result<ModelSpec, HubError> {
        ModelSpec::parse(&self.config.models, spec)
    }

    /// The directory to load for `spec` at `revision` (`None`: the pin for known models,
    /// `main` for other repos). A complete cached snapshot is used without any network
    /// access; otherwise the missing files are downloaded and verified, unless `offline` (or
    /// the configuration's `offline`) is set, which makes that an error saying how to get the
    /// model. A local directory is checked and used in place.
    pub fn resolve(
        &self,
        spec: &str,
        revision: Option<&str>,
        offline: bool,
        progress: &dyn Progress,
    ) -> Result<ResolvedModel, HubError> {
        self.run(
            spec,
            revision,
            Mode::Resolve {
                offline: offline || self.config.offline,
            },
            progress,
        )
    }

    /// `sys1rust pull`: like [`Hub::resolve`], but also re-hashes files already cached
    /// (replacing any that fail) and, for a branch, asks the hub for its current commit. With
    /// `offline` configured it only verifies what is cached.
    pub fn pull(
        &self,
        spec: &str,
        revision: Option<&str>,
        progress: &dyn Progress,
    ) -> Result<ResolvedModel, HubError> {
        let mode = if self.config.offline {
            Mode::Resolve { offline: true }
        } else {
            Mode::Pull
        };
        let resolved = self.run(spec, revision, mode, progress)?;
        if self.config.offline {
            // Offline pull = verify; resolve() alone trusts what a snapshot shows.
            self.verify_cached(&resolved, spec, progress)?;
        }
        Ok(resolved)
    }

    fn run(
        &self,
        spec: &str,
        revision: Option<&str>,
        mode: Mode,
        progress: &dyn Progress,
    ) -> Result<ResolvedModel, HubError> {
        if let Some(r) = revision {
            check_revision(r)?;
        }
        match self.parse(spec)? {
            ModelSpec::Local(dir) => {
                if let Some(r) = revision {
                    return Err(HubError::RevisionForLocal {
                        revision: r.to_owned(),
                        dir,
                    });
                }
                check_local(&dir)?;
                Ok(ResolvedModel {
                    name: dir.display().to_string(),
                    dir,
                    repo: None,
                    revision: None,
                    pinned: false,
                })
            }
            ModelSpec::Known(m) => match revision {
                Some(r) if !(is_commit_prefix(r) && m.revision.starts_with(r)) => {
                    self.unpinned(&m.repo, &m.name, spec, r, mode, progress)
                }
                _ => self.pinned(&m, mode, progress),
            },
            ModelSpec::Repo(repo) => self.unpinned(
                &repo,
                &repo,
                spec,
                revision.unwrap_or("main"),
                mode,
                progress,
            ),
        }
    }

    fn pinned(
        &self,
        m: &KnownModel,
        mode: Mode,
        progress: &dyn Progress,
    ) -> Result<ResolvedModel, HubError> {
        let cache = RepoCache::new(&self.config.cache_dir, &m.repo);
        let resolved = ResolvedModel {
            dir: cache.snapshot_dir(&m.revision),
            name: m.name.clone(),
            repo: Some(m.repo.clone()),
            revision: Some(m.revision.clone()),
            pinned: true,
        };
        let complete = |c: &RepoCache| {
            m.files
                .iter()
                .all(|f| c.has_file(&m.revision, &f.path, Some((&f.digest, f.size))))
        };
        let offline = match mode {
            Mode::Resolve { offline } => {
                if complete(&cache) {
                    tracing::debug!(model = %m.name, dir = %resolved.dir.display(), "cached");
                    return Ok(resolved);
                }
                offline
            }
            Mode::Pull => false,
        };
        if offline {
            return Err(self.not_cached(
                format!("{} ({}@{})", m.name, m.repo, m.short_revision()),
                m.name.clone(),
            ));
        }
        progress.message(&format!(
            "pulling {} ({}@{})",
            m.name,
            m.repo,
            m.short_revision()
        ));
        let _lock = lock_repo(&cache, &m.repo, progress)?;
        // Files another process finished while we waited for the lock are found by
        // ensure_file and only checked.
        let verify_existing = mode == Mode::Pull;
        let plan: Vec<(&str, Option<u64>)> = m
            .files
            .iter()
            .map(|f| (f.path.as_str(), Some(f.size)))
            .collect();
        progress.plan(&plan);
        for f in &m.files {
            let file = FileJob {
                repo: &m.repo,
                commit: &m.revision,
                path: &f.path,
                digest: &f.digest,
                size: Some(f.size),
            };
            self.ensure_file(&cache, &file, verify_existing, progress)?;
        }
        Ok(resolved)
    }

    fn unpinned(
        &self,
        repo: &str,
        name: &str,
        spec: &str,
        revision: &str,
        mode: Mode,
        progress: &dyn Progress,
    ) -> Result<ResolvedModel, HubError> {
        let cache = RepoCache::new(&self.config.cache_dir, repo);
        let cached = if is_commit_prefix(revision) {
            cache.find_snapshot(repo, revision)?
        } else {
            cache.read_ref(revision)
        };
        let resolved = |commit: String| ResolvedModel {
            dir: cache.snapshot_dir(&commit),
            name: name.to_owned(),
            repo: Some(repo.to_owned()),
            revision: Some(commit),
            pinned: false,
        };
        let complete = |commit: &str| {
            CHECKPOINT_FILES
                .iter()
                .all(|p| cache.has_file(commit, p, None))
        };
        if let Mode::Resolve { offline } = mode {
            if let Some(commit) = cached.filter(|c| complete(c)) {
                return Ok(resolved(commit));
            }
            if offline {
                return Err(self.not_cached(
                    format!("{name} at revision {revision}"),
                    format!("{} --revision {revision}", quoted(spec)),
                ));
            }
        }

        progress.message(&format!("pulling {repo}@{revision}"));
        let _lock = lock_repo(&cache, repo, progress)?;
        // The first HEAD says which commit the revision is; every file is then fetched at
        // that commit, so a push during the pull cannot mix two revisions.
        let first = self.client.head(repo, revision, CHECKPOINT_FILES[0])?;
        let commit = first
            .commit
            .clone()
            .filter(|c| c.len() == 40 && is_commit_prefix(c))
            .ok_or_else(|| HubError::BadResponse {
                url: shown(&self.client.resolve_url(repo, revision, CHECKPOINT_FILES[0])),
                reason: "no X-Repo-Commit header with a 40-hex commit".into(),
            })?;
        // Every file's size and digest first, so the display can show the pull's total.
        let mut metas = Vec::with_capacity(CHECKPOINT_FILES.len());
        for (i, path) in CHECKPOINT_FILES.iter().enumerate() {
            let meta = if i == 0 {
                first.clone()
            } else {
                self.client.head(repo, &commit, path)?
            };
            let digest = meta
                .etag
                .as_deref()
                .and_then(Digest::parse)
                .ok_or_else(|| HubError::BadResponse {
                    url: shown(&self.client.resolve_url(repo, &commit, path)),
                    reason: format!(
                        "no sha256 or git blob id to verify against (ETag {:?})",
                        meta.etag
                    ),
                })?;
            metas.push((*path, digest, meta.size));
        }
        let plan: Vec<(&str, Option<u64>)> = metas.iter().map(|(p, _, s)| (*p, *s)).collect();
        progress.plan(&plan);
        for (path, digest, size) in &metas {
            let file = FileJob {
                repo,
                commit: &commit,
                path,
                digest,
                size: *size,
            };
            self.ensure_file(&cache, &file, mode == Mode::Pull, progress)?;
        }
        if revision != commit && !is_commit_prefix(revision) {
            cache.write_ref(revision, &commit)?;
        }
        Ok(resolved(commit))
    }

    /// Makes `snapshots/<commit>/<path>` a verified file: keeps a good link, links an
    /// existing blob after hashing it, or downloads (resuming), hashes and renames. Bytes
    /// that fail the check are deleted and never linked.
    fn ensure_file(
        &self,
        cache: &RepoCache,
        f: &FileJob<'_>,
        verify_existing: bool,
        progress: &dyn Progress,
    ) -> Result<(), HubError> {
        let expected = f.size.map(|s| (f.digest, s));
        let linked = cache.has_file(f.commit, f.path, expected) && link_points_at(cache, f);
        if linked
            && (!verify_existing
                || self.check_blob(cache, f, &cache.snapshot_file(f.commit, f.path), progress)?)
        {
            progress.file_done(f.path);
            return Ok(());
        }
        let blob = cache.blob(f.digest);
        if blob.is_file() && self.check_blob(cache, f, &blob, progress)? {
            cache.link(f.commit, f.path, f.digest)?;
            progress.file_done(f.path);
            return Ok(());
        }
        let _blob_lock = lock_blob(cache, f.digest)?;
        // huggingface_hub (holding this lock) may have written the blob meanwhile.
        if blob.is_file() && self.check_blob(cache, f, &blob, progress)? {
            cache.link(f.commit, f.path, f.digest)?;
            progress.file_done(f.path);
            return Ok(());
        }
        let blobs = cache.blobs();
        fs::create_dir_all(&blobs).map_err(HubError::io("create", &blobs))?;
        let incomplete = cache.incomplete(f.digest);
        self.client
            .download(f.repo, f.commit, f.path, &incomplete, f.size, progress)?;
        if let Err(e) = self.verify(f, &incomplete, progress) {
            let _ = fs::remove_file(&incomplete);
            return Err(e);
        }
        fs::rename(&incomplete, &blob).map_err(HubError::io("rename", &blob))?;
        cache.link(f.commit, f.path, f.digest)?;
        tracing::info!(
            repo = f.repo,
            path = f.path,
            digest = f.digest.hex(),
            "verified"
        );
        progress.file_done(f.path);
        Ok(())
    }

    /// Hashes a blob already in the cache; one that fails is removed (with the link to it)
    /// so it gets downloaded again. Returns whether it was good.
    fn check_blob(
        &self,
        cache: &RepoCache,
        f: &FileJob<'_>,
        path: &Path,
        progress: &dyn Progress,
    ) -> Result<bool, HubError> {
        match self.verify(f, path, progress) {
            Ok(()) => Ok(true),
            Err(HubError::Integrity {
                expected, actual, ..
            }) => {
                tracing::warn!(repo = f.repo, path = f.path, %expected, %actual, "cached blob is corrupt; fetching it again");
                progress.message(&format!(
                    "{}: cached copy is corrupt ({actual}, expected {expected}); downloading again",
                    f.path
                ));
                let blob = cache.blob(f.digest);
                let _ = fs::remove_file(&blob);
                let _ = fs::remove_file(cache.snapshot_file(f.commit, f.path));
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Size, then hash, of the file at `path` against `f`.
    fn verify(
        &self,
        f: &FileJob<'_>,
        path: &Path,
        progress: &dyn Progress,
    ) -> Result<(), HubError> {
        let len = fs::metadata(path)
            .map_err(HubError::io("stat", path))?
            .len();
        let integrity = |expected: String, actual: String| HubError::Integrity {
            repo: f.repo.to_owned(),
            revision: f.commit.to_owned(),
            path: f.path.to_owned(),
            expected,
            actual,
        };
        if let Some(size) = f.size.filter(|&s| s != len) {
            return Err(integrity(format!("{size} bytes"), format!("{len} bytes")));
        }
        progress.verify_started(f.path, len);
        let actual = hash_file(path, f.digest, &mut |done| {
            progress.verify_progress(f.path, done)
        })?;
        if actual != f.digest.hex() {
            let kind = f.digest.kind();
            return Err(integrity(
                format!("{kind} {}", f.digest.hex()),
                format!("{kind} {actual}"),
            ));
        }
        Ok(())
    }

    /// Re-hashes every file of a resolved snapshot (offline `pull`). A file that fails loses
    /// its blob as well as its snapshot entry: the cache must not keep bytes known to be bad,
    /// and the next resolve then says the file is missing, which is the truth.
    fn verify_cached(
        &self,
        resolved: &ResolvedModel,
        spec: &str,
        progress: &dyn Progress,
    ) -> Result<(), HubError> {
        let (Some(repo), Some(commit)) = (&resolved.repo, &resolved.revision) else {
            return Ok(());
        };
        let cache = RepoCache::new(&self.config.cache_dir, repo);
        let plan: Vec<(&str, Option<u64>)> = CHECKPOINT_FILES
            .iter()
            .filter_map(|p| {
                let size = fs::metadata(cache.snapshot_file(commit, p)).ok()?.len();
                Some((*p, Some(size)))
            })
            .collect();
        progress.plan(&plan);
        for path in CHECKPOINT_FILES {
            let file = cache.snapshot_file(commit, path);
            // The blob's name is the digest it was stored under.
            let Some(digest) = fs::read_link(&file).ok().and_then(|t| {
                t.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(Digest::parse)
            }) else {
                continue;
            };
            let job = FileJob {
                repo,
                commit,
                path,
                digest: &digest,
                size: None,
            };
            match self.verify(&job, &file, progress) {
                Ok(()) => progress.file_done(path),
                Err(HubError::Integrity {
                    expected, actual, ..
                }) => {
                    for gone in [cache.blob(&digest), file] {
                        match fs::remove_file(&gone) {
                            // Another process may have removed it first; gone is gone.
                            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                                return Err(HubError::io("remove", &gone)(e))
                            }
                            _ => {}
                        }
                    }
                    // The pin (a known name) or the exact commit, so the pull that repairs
                    // it fetches this snapshot and no newer one.
                    let pull_args = if resolved.pinned {
                        quoted(spec)
                    } else {
                        format!("{} --revision {commit}", quoted(spec))
                    };
                    return Err(HubError::CorruptInCache {
                        snapshot: format!("{repo}@{commit}"),
                        path: (*path).to_owned(),
                        mismatch: format!("expected {expected}, got {actual}"),
                        pull_args,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn not_cached(&self, what: String, pull_args: String) -> HubError {
        HubError::NotCached {
            what,
            cache: self.config.cache_dir.clone(),
            pull_args,
        }
    }
}

/// One file to put into a snapshot.
struct FileJob<'a> {
    repo: &'a str,
    commit: &'a str,
    path: &'a str,
    digest: &'a Digest,
    size: Option<u64>,
}

/// `spec` as one shell word in a suggested command.
fn quoted(spec: &str) -> String {
    if spec.contains(char::is_whitespace) {
        format!("'{spec}'")
    } else {
        spec.to_owned()
    }
}

/// Whether the snapshot entry is a link to this digest's blob (or a plain file, where links
/// are unavailable). `has_file` checks the same only when the size is known.
fn link_points_at(cache: &RepoCache, f: &FileJob<'_>) -> bool {
    match fs::read_link(cache.snapshot_file(f.commit, f.path)) {
        Ok(t) => t.file_name().and_then(|n| n.to_str()) == Some(f.digest.hex()),
        Err(_) => true,
    }
}

/// A local checkpoint needs at least the two files `laya.Agent` cannot do without, and the
/// three a network-free loader needs (model.md §1.2). Each must be a regular file (through
/// links); one that is there but unusable is listed with the reason, so that a directory
/// without read permission, a link loop or a FIFO is not reported as a file that is missing.
fn check_local(dir: &Path) -> Result<(), HubError> {
    let missing: Vec<String> = CHECKPOINT_FILES
        .iter()
        .filter_map(|p| unusable(&dir.join(p)).map(|why| format!("{p}{why}")))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(HubError::LocalIncomplete {
            dir: dir.to_path_buf(),
            missing: missing.join(", "),
        })
    }
}

/// `None` when `path` is a regular file (after links); else what follows its name in the
/// list of missing files: nothing when it does not exist, the reason otherwise.
fn unusable(path: &Path) -> Option<String> {
    match fs::metadata(path) {
        Ok(m) if m.is_file() => None,
        Ok(m) => Some(format!(" (not a regular file: {})", file_kind(&m))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A link whose target is gone exists, as a link.
            match fs::symlink_metadata(path) {
                Ok(_) => Some(" (a link to nothing)".into()),
                Err(_) => Some(String::new()),
            }
        }
        Err(e) => Some(format!(" (cannot be examined: {e})")),
    }
}

/// What a file that is not a regular file is.
fn file_kind(m: &fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_block_device() || t.is_char_device() {
            return "a device";
        }
    }
    if m.is_dir() {
        "a directory"
    } else {
        "neither a file nor a directory"
    }
}

/// Bytes of the regular files under `dir` (links not followed).
fn dir_size(dir: &Path) -> u64 {
    let Ok(rd) = fs::read_dir(dir) else { return 0 };
    rd.filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files that are there but unusable are listed with the reason, not as missing: a
    /// directory, a socket (as a FIFO would be), a link loop, a link to nothing.
    #[cfg(unix)]
    #[test]
    fn unusable_local_files_say_why() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        fs::create_dir_all(d.join("encoder")).expect("mkdir");
        fs::create_dir_all(d.join("tokenizer")).expect("mkdir");
        fs::write(d.join("rl_agent_config.json"), "{}").expect("write");
        // model.safetensors: a directory.
        fs::create_dir(d.join("model.safetensors")).expect("mkdir");
        // encoder/config.json: a socket.
        let _socket =
            std::os::unix::net::UnixListener::bind(d.join("encoder/config.json")).expect("socket");
        // tokenizer/tokenizer.json: a link loop.
        symlink("tokenizer.json", d.join("tokenizer/tokenizer.json")).expect("link");
        // tokenizer/tokenizer_config.json: a link to nothing.
        symlink("gone.json", d.join("tokenizer/tokenizer_config.json")).expect("link");
        let e = check_local(d).expect_err("incomplete");
        let text = e.to_string();
        for want in [
            "model.safetensors (not a regular file: a directory)",
            "encoder/config.json (not a regular file: a socket)",
            "tokenizer/tokenizer.json (cannot be examined:",
            "tokenizer/tokenizer_config.json (a link to nothing)",
        ] {
            assert!(text.contains(want), "missing `{want}` in: {text}");
        }
        assert!(!text.contains("rl_agent_config.json"), "{text}");
        // Files that are simply absent are named alone, as before.
        fs::remove_file(d.join("rl_agent_config.json")).expect("rm");
        let text = check_local(d).expect_err("incomplete").to_string();
        assert!(text.contains("missing rl_agent_config.json, "), "{text}");
    }
}

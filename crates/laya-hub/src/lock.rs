//! Inter-process locks (flock(2) on Unix, LockFileEx on Windows), held while a pull writes.
//!
//! * One lock per repo, `<hub>/.locks/models--org--name/laya-hub.lock`: two sys1rust
//!   processes pulling the same model take turns; the second finds the files there and only
//!   verifies them.
//! * One lock per blob, `<hub>/.locks/models--org--name/<etag>.lock`: the file
//!   huggingface_hub's `filelock` takes around the same blob, so a Python download and ours
//!   never append to one `.incomplete` file together.
//!
//! Lock files are never deleted: deleting one while another process waits on it would let a
//! third process lock a new file of the same name. flock is advisory and may be a no-op on
//! some network file systems; the hash check before a blob becomes visible still holds there.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use crate::cache::RepoCache;
use crate::error::HubError;
use crate::models::Digest;
use crate::progress::Progress;

/// A held lock; released when dropped (closing the file releases the flock).
#[derive(Debug)]
pub(crate) struct Lock {
    _file: File,
    path: PathBuf,
}

impl Drop for Lock {
    fn drop(&mut self) {
        tracing::trace!(path = %self.path.display(), "lock released");
    }
}

/// Takes the repo's lock, telling `progress` when it has to wait for another process.
pub(crate) fn lock_repo(
    cache: &RepoCache,
    repo: &str,
    progress: &dyn Progress,
) -> Result<Lock, HubError> {
    let path = cache.locks_dir().join("laya-hub.lock");
    acquire(&path, &mut || {
        progress.message(&format!(
            "waiting for another process to finish pulling {repo} (lock {})",
            path.display()
        ))
    })
}

/// Held (shared) by every process that serves a repo's files: `rm` takes it exclusively, so
/// it refuses while any server holds it and no server starts on files being removed.
#[derive(Debug)]
pub struct InUse {
    _file: File,
}

/// Opens (creating it and its directory) the lock file at `path`.
fn open_lock_file(path: &Path) -> Result<File, HubError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(HubError::io("create", dir))?;
    }
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(HubError::io("open lock file", path))
}

/// The exclusive lock at `path` if nobody holds it, `None` if someone does.
fn try_claim(path: PathBuf) -> Result<Option<Lock>, HubError> {
    let file = open_lock_file(&path)?;
    match fs4::FileExt::try_lock(&file) {
        Ok(()) => Ok(Some(Lock { _file: file, path })),
        Err(fs4::TryLockError::WouldBlock) => Ok(None),
        Err(fs4::TryLockError::Error(e)) => Err(HubError::io("lock", &path)(e)),
    }
}

fn serving_lock(cache: &RepoCache) -> PathBuf {
    cache.locks_dir().join("laya-hub-serving.lock")
}

/// Marks the repo as served until the guard is dropped (waits while an `rm` is removing it).
pub(crate) fn hold_in_use(cache: &RepoCache) -> Result<InUse, HubError> {
    let path = serving_lock(cache);
    let file = open_lock_file(&path)?;
    fs4::FileExt::lock_shared(&file).map_err(HubError::io("lock", &path))?;
    Ok(InUse { _file: file })
}

/// The exclusive serving lock if no server holds the repo, `None` if one does.
pub(crate) fn claim_unused(cache: &RepoCache) -> Result<Option<Lock>, HubError> {
    try_claim(serving_lock(cache))
}

/// The repo's pull lock if no pull holds it, `None` if one does.
pub(crate) fn claim_repo(cache: &RepoCache) -> Result<Option<Lock>, HubError> {
    try_claim(cache.locks_dir().join("laya-hub.lock"))
}

/// Takes the blob lock huggingface_hub uses for `digest`.
pub(crate) fn lock_blob(cache: &RepoCache, digest: &Digest) -> Result<Lock, HubError> {
    acquire(
        &cache.locks_dir().join(format!("{}.lock", digest.hex())),
        &mut || {},
    )
}

fn acquire(path: &Path, on_wait: &mut dyn FnMut()) -> Result<Lock, HubError> {
    let file = open_lock_file(path)?;
    // Fully qualified: from Rust 1.89 `File` has inherent lock methods of the same names.
    match fs4::FileExt::try_lock(&file) {
        Ok(()) => {}
        Err(fs4::TryLockError::WouldBlock) => {
            on_wait();
            tracing::info!(path = %path.display(), "waiting for lock");
            fs4::FileExt::lock(&file).map_err(HubError::io("lock", path))?;
        }
        Err(fs4::TryLockError::Error(e)) => return Err(HubError::io("lock", path)(e)),
    }
    tracing::trace!(path = %path.display(), "lock taken");
    Ok(Lock {
        _file: file,
        path: path.to_path_buf(),
    })
}

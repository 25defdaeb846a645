//! The one error type of this crate. Every message names what the user gave or what failed
//! (model, file, URL, path) and, where there is one, what to do next.

use std::path::PathBuf;

/// Why a model could not be resolved, downloaded or listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    /// The spec is neither a known name, a repo id nor a directory.
    #[error(
        "unknown model `{spec}`: use one of {known}, a Hugging Face repo id (org/name) \
         or a local checkpoint directory"
    )]
    UnknownModel {
        /// What the user typed.
        spec: String,
        /// The known names, comma-separated.
        known: String,
    },

    /// The spec looks like a path but there is no directory there.
    #[error("no checkpoint directory at {0}")]
    LocalNotFound(PathBuf),

    /// A local checkpoint directory lacks files a checkpoint needs.
    #[error("{dir} is not a complete checkpoint: missing {missing}")]
    LocalIncomplete {
        /// The directory given.
        dir: PathBuf,
        /// The missing files, comma-separated.
        missing: String,
    },

    /// `--revision` was given together with a local directory.
    #[error("--revision `{revision}` applies to hub models, not to the local directory {dir}")]
    RevisionForLocal {
        /// The revision given.
        revision: String,
        /// The directory given.
        dir: PathBuf,
    },

    /// A revision that is not usable (empty, or with characters a ref cannot have).
    #[error(
        "invalid revision `{0}`: expected a branch, tag or commit (not empty; no whitespace, \
         `..` or `\\`; no leading or trailing `/`)"
    )]
    InvalidRevision(String),

    /// A commit prefix matches more than one cached snapshot.
    #[error("revision `{revision}` matches several cached snapshots of {repo}: {candidates}")]
    AmbiguousRevision {
        /// Repo id.
        repo: String,
        /// The prefix given.
        revision: String,
        /// The matching commits, comma-separated.
        candidates: String,
    },

    /// `show` of a repo revision the cache has no snapshot of.
    #[error("{what} is not in the cache at {cache}: `sys1rust pull {pull_args}` downloads it")]
    NotPulled {
        /// The model and revision, for the message.
        what: String,
        /// The hub cache directory searched.
        cache: PathBuf,
        /// Arguments of the `sys1rust pull` that would fetch it.
        pull_args: String,
    },

    /// Downloads are off and the model is not (completely) in the cache.
    #[error(
        "{what} is not in the cache at {cache} and downloads are off (--offline, HF_HUB_OFFLINE \
         or TRANSFORMERS_OFFLINE). \
         Download it with `sys1rust pull {pull_args}` on a machine that can reach the hub \
         (then copy that cache here, or point HF_HOME at it), or pass `--model DIR` with a \
         local checkpoint directory"
    )]
    NotCached {
        /// The model and revision, for the message.
        what: String,
        /// The hub cache directory searched.
        cache: PathBuf,
        /// Arguments of the `sys1rust pull` that would fetch it.
        pull_args: String,
    },

    /// The hub answered 404: no such repo, revision or file.
    #[error("{url}: not found on the hub ({code}){hint}")]
    NotFound {
        /// The URL asked for.
        url: String,
        /// The hub's `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`) or `HTTP 404`.
        code: String,
        /// Extra advice, may be empty.
        hint: String,
    },

    /// The hub answered 401 or 403.
    #[error("{url}: access denied (HTTP {status}){hint}")]
    Unauthorized {
        /// The URL asked for.
        url: String,
        /// 401 or 403.
        status: u16,
        /// Whether a token was sent, and what to do.
        hint: String,
    },

    /// Any other HTTP error status.
    #[error("{url}: HTTP {status}{detail}")]
    Http {
        /// The URL asked for.
        url: String,
        /// The status code.
        status: u16,
        /// The hub's `X-Error-Message`, if any.
        detail: String,
    },

    /// The hub could not be reached (DNS, connect, TLS, timeout before an answer).
    #[error("cannot reach {url}: {reason}")]
    Network {
        /// The URL asked for.
        url: String,
        /// The transport error.
        reason: String,
        /// The host name did not resolve (no network, or a wrong `HF_ENDPOINT`): not retried.
        name_resolution: bool,
    },

    /// The hub's answer lacked something the protocol promises (a header, a valid redirect).
    #[error("{url}: unexpected answer from the hub: {reason}")]
    BadResponse {
        /// The URL asked for.
        url: String,
        /// What was wrong.
        reason: String,
    },

    /// The body stopped before the whole file arrived (connection closed, read timeout). The
    /// bytes so far are kept in `blobs/<hash>.incomplete`; the next pull resumes from there.
    #[error(
        "download of {path} from {repo} stopped after {received} of {expected} bytes ({reason}); \
         run the command again to resume"
    )]
    Interrupted {
        /// Repo id.
        repo: String,
        /// File path in the repo.
        path: String,
        /// Bytes on disk now.
        received: u64,
        /// Bytes expected, or `?`.
        expected: String,
        /// The transport error.
        reason: String,
    },

    /// A downloaded file did not match its pinned size or hash. The bytes were deleted and
    /// nothing was added to the snapshot.
    #[error(
        "{path} of {repo}@{revision} failed verification: expected {expected}, got {actual}; \
         the downloaded file was deleted. Run the command again; if it fails again the hub or \
         a proxy is serving different content than the pin"
    )]
    Integrity {
        /// Repo id.
        repo: String,
        /// Commit.
        revision: String,
        /// File path in the repo.
        path: String,
        /// `sha256 <hex>`, `git blob sha1 <hex>` or `<n> bytes`.
        expected: String,
        /// What the bytes gave.
        actual: String,
    },

    /// A cached file failed verification while downloads are off (an offline `pull`). The
    /// corrupt blob and its snapshot entry were deleted, so the cache no longer claims to
    /// hold the file.
    #[error(
        "{path} of {snapshot} in the cache failed verification ({mismatch}); the \
         corrupt file was deleted from the cache. Downloads are off (HF_HUB_OFFLINE or \
         TRANSFORMERS_OFFLINE): run `sys1rust pull {pull_args}` where the hub is reachable to \
         download it again"
    )]
    CorruptInCache {
        /// `<repo id>@<commit>` (one field, so this variant does not grow the error type).
        snapshot: String,
        /// File path in the repo.
        path: String,
        /// `expected <digest or size>, got <what the bytes gave>`.
        mismatch: String,
        /// Arguments of the `sys1rust pull` that would fetch it again.
        pull_args: String,
    },

    /// A file system operation failed.
    // The OS error is part of the message and deliberately not `source()`: reports that walk
    // the chain would otherwise print it twice.
    #[error("cannot {action} {path}: {error}")]
    Io {
        /// What was being done (`create`, `read`, `rename`, …).
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },

    /// The configured token cannot be sent: it holds a character an HTTP header cannot
    /// carry. The message never contains the token.
    #[error(
        "the Hugging Face token cannot be sent: character {position} of it is {what}, which an \
         HTTP header cannot carry. Fix the token in HF_TOKEN, else HUGGING_FACE_HUB_TOKEN, else \
         the token file (HF_TOKEN_PATH, default $HF_HOME/token), whichever is set first"
    )]
    InvalidToken {
        /// 1-based position of the first bad character.
        position: usize,
        /// What kind of character it is (never the character itself).
        what: &'static str,
    },

    /// A proxy variable holds something this client cannot use as a proxy. The message
    /// names the variable, never its value (it may carry a password).
    #[error("{variable} (or its lower-case form) is not a usable proxy: {reason}")]
    InvalidProxy {
        /// `HTTPS_PROXY`, `HTTP_PROXY` or `ALL_PROXY`.
        variable: &'static str,
        /// Why it was refused.
        reason: String,
    },

    /// The request could not be sent as built (a header or URL the HTTP library refuses).
    /// Not a network problem, so never retried.
    #[error("cannot send a request to {url}: {reason}")]
    RequestRefused {
        /// The URL, without its query.
        url: String,
        /// What was wrong (never a header's value).
        reason: String,
    },

    /// `HF_ENDPOINT` (or the configured endpoint) is not an http(s) URL.
    #[error("invalid hub endpoint `{endpoint}`: {reason}")]
    InvalidEndpoint {
        /// The value given.
        endpoint: String,
        /// Why it was refused.
        reason: String,
    },

    /// No cache directory could be derived (no `HF_HUB_CACHE`, `HF_HOME`, `XDG_CACHE_HOME` or `HOME`).
    #[error("no cache directory: set HF_HOME (or HF_HUB_CACHE)")]
    NoCacheDir,

    /// An injected model table is inconsistent.
    #[error("invalid model table: {0}")]
    InvalidModelTable(String),

    /// `rm` of a model the cache does not hold.
    #[error("{name} is not in the cache ({path})")]
    NothingCached {
        /// The model as named.
        name: String,
        /// Where it would be.
        path: PathBuf,
    },

    /// `rm` of a local directory: it is the user's, not the cache's.
    #[error(
        "{0} is a local directory, not a cached model; sys1rust rm only removes what it downloaded"
    )]
    NotInCache(PathBuf),

    /// `rm` while a process serves the model or pulls it.
    #[error("{name} is in use by {by}; stop it first")]
    InUse {
        /// The model as named.
        name: String,
        /// `a running server` or `a download`.
        by: &'static str,
    },
}

impl HubError {
    /// The hub could not be reached at all (as opposed to refusing or failing a file).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, HubError::Network { .. })
    }

    /// An [`HubError::Io`] for `path`.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> HubError {
        let path = path.into();
        move |error| HubError::Io {
            action,
            path,
            error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message and every `source()` below it, as `{:?}` of an anyhow error prints them.
    fn report(e: &dyn std::error::Error) -> String {
        let mut out = e.to_string();
        let mut next = e.source();
        while let Some(s) = next {
            out.push_str("\nCaused by: ");
            out.push_str(&s.to_string());
            next = s.source();
        }
        out
    }

    #[test]
    fn io_errors_say_the_os_error_once() {
        let e = HubError::io("write", "/cache/blobs/x")(std::io::Error::other(
            "No space left on device",
        ));
        let text = report(&e);
        assert_eq!(text.matches("No space left on device").count(), 1, "{text}");
        assert!(text.starts_with("cannot write /cache/blobs/x: "), "{text}");
    }
}

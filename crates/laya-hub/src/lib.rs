//! Model management for sys1rust: users name a model, never a path.
//!
//! * [`ModelTable`] — the models known by name (`typed-decisions`, the default;
//!   `multilingual`; `english`; plus aliases), each pinned to a commit and to the size and
//!   hash of every file a checkpoint needs (`spec/model.md` §1.1–1.2). Injectable, so tests
//!   and private deployments bring their own.
//! * [`ModelSpec`] — what a `--model` value means: a known name, a repo id `org/name`, or a
//!   local checkpoint directory (used in place, nothing downloaded).
//! * [`Hub`] — resolves a spec to a directory ([`Hub::resolve`], offline-first), downloads
//!   ([`Hub::pull`]) into the Hugging Face cache layout so `huggingface_hub` and `laya` see
//!   the same files, lists what is cached ([`Hub::list`], [`render_models_table`]) and
//!   what one model is made of ([`Hub::show`]).
//! * [`Progress`] — how a download reports; [`stderr_progress`] picks indicatif bars on a
//!   terminal and plain lines otherwise.
//!
//! Guarantees: a file becomes visible in a snapshot only after its size and hash were
//! checked (sha256 for LFS files, git blob sha1 for the rest; a failing file is deleted and
//! the call fails); a partial download is kept and resumed with a `Range` request; one lock
//! per repo (and huggingface_hub's lock per blob) keeps concurrent pulls from corrupting
//! each other; the token (`HF_TOKEN`) is sent to the endpoint's origin only, never after a
//! redirect to another origin (the hub's CDN); offline (`HF_HUB_OFFLINE` or the `offline`
//! argument) a missing model is an error saying how to get it.
//!
//! ```no_run
//! use laya_hub::{stderr_progress, Hub, DEFAULT_MODEL};
//!
//! # fn main() -> Result<(), laya_hub::HubError> {
//! let hub = Hub::from_env()?;
//! let model = hub.resolve(DEFAULT_MODEL, None, false, &*stderr_progress())?;
//! println!("{} at {}", model.name, model.dir.display());
//! print!("{}", laya_hub::render_models_table(&hub.list()));
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod cache;
mod config;
mod details;
mod download;
mod error;
mod hub;
mod list;
mod lock;
mod models;
mod progress;
mod proxy;
mod repo_id;
mod spec;
mod verify;

pub use config::{env_flag, HubConfig, DEFAULT_ENDPOINT};
pub use details::{FileDetails, FileState, ModelDetails};
pub use error::HubError;
pub use hub::{Hub, ResolvedModel};
pub use list::{render_models_table, CachedModel};
pub use lock::InUse;
pub use models::{Digest, KnownModel, ModelTable, PinnedFile, CHECKPOINT_FILES, DEFAULT_MODEL};
pub use progress::{
    format_size, stderr_progress, suspend_bars, BarProgress, LineProgress, NoProgress, Progress,
};
pub use proxy::ProxyConfig;
pub use spec::ModelSpec;

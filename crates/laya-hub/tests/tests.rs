//! laya-hub integration tests, linked as one binary: a mock hub on 127.0.0.1 (two origins:
//! the hub and its CDN) serving the tiny fixture checkpoint under a pinned revision.

mod concurrency;
mod hf_compat;
mod proxy;
mod pull;
mod show;
mod support;

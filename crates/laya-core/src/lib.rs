//! `laya-core`: everything upstream laya 0.4.15 does outside the neural network, in plain
//! Rust with no GPU code, no HTTP and no environment reads.
//!
//! A request flows through it one way:
//!
//! * [`request`] validates a body (spec api.md §5.1 steps 6-14) into a [`request::DecisionRequest`]
//!   or [`request::BatchRequest`], or refuses it with a [`request::RequestError`] whose
//!   `Display` is upstream's `detail` and whose kind is the class of refusal;
//! * [`decide::decide`] answers it (steps 15-17): [`routing`] picks a checkpoint per state,
//!   [`checkpoints`] hands out the resident one (loading it, and evicting the least recently
//!   used, when the server holds several), [`question`] validates the questions, [`tournament`] narrows large choices, each
//!   checkpoint's [`agent::Agent`] lays out token rows ([`layout`], [`tokenizer`]), runs them
//!   through an engine behind [`engine::Forward`] and decodes the logits ([`decode`]); then
//!   [`confidence`] applies the gate and Jev's confidence;
//! * [`render`] writes the answer as upstream's exact bytes.
//!
//! [`config`] and [`checkpoint`] read a checkpoint directory's configs and tensor inventory
//! for the engines. Exact CPython JSON semantics come from the `pyjson` crate.

pub mod agent;
pub mod checkpoint;
pub mod checkpoints;
pub mod confidence;
pub mod config;
pub mod decide;
pub mod decode;
pub mod engine;
pub mod layout;
pub mod question;
pub mod render;
pub mod request;
pub mod routing;
pub mod tokenizer;
pub mod tournament;

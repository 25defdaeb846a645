//! `laya-core`: everything upstream laya 0.4.15 does outside the neural network, in plain
//! Rust with no GPU code: checkpoint configs, request rules, tokenization, the sequence
//! layout, and answer decoding. Engines plug in through [`engine::Forward`]; [`engine_api::Engine`]
//! ties a checkpoint's tokenizer and configs to one.

pub mod checkpoint;
pub mod confidence;
pub mod config;
pub mod decode;
pub mod engine;
pub mod engine_api;
pub mod layout;
pub mod pyjson;
pub mod question;
pub mod render;
pub mod request;
pub mod routing;
pub mod tokenizer;

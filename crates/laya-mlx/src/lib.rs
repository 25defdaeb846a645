//! `laya-mlx`: the Laya decision model's forward pass on [MLX](https://github.com/ml-explore/mlx)
//! through `mlx-rs`.
//!
//! The model (spec `model.md` §3) is a ModernBERT/mmBERT encoder (`encoder.rs`), a type
//! embedding, a small transformer decision head, an option scorer at each `[MASK]` marker and
//! an act head (`head.rs`). [`MlxEngine`] loads a checkpoint directory — configs through
//! `laya_core::config`, `model.safetensors` strictly checked against them ([`weights`]) — and
//! implements [`laya_core::engine::Forward`]: rows of token ids in, raw option logits and act
//! logits out, in f32.
//!
//! Rows are never padded against each other in a linear layer: every one runs on all rows'
//! tokens packed into one matrix. Attention runs per row on the CPU (the encoder's and the
//! decision head's on the host, `host_attention.rs`), and on a GPU over the rows padded to the
//! longest with the padding masked out (`attention.rs`). On the CPU in f32 or `--int8` the
//! linear layers run on the host too (`f32_linear.rs`, `int8.rs`), and the residual stream
//! stays in the host's buffers (`host.rs`) from the encoder's first layer to the decision
//! head's last.
//!
//! ```no_run
//! use laya_core::engine::{Forward, Row};
//! use laya_core::config::QType;
//! use laya_mlx::{EngineSettings, MlxEngine};
//!
//! let mut engine = MlxEngine::load("checkpoints/tiny".as_ref(), &EngineSettings::default())?;
//! let row = Row { ids: vec![50281, 66, 50282, 50284, 209, 50284, 270, 50282], markers: vec![3, 5], qtype: QType::Choice };
//! let out = engine.forward(&[row])?;
//! println!("{:?} {:?}", out[0].logits, out[0].act_logits);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

#[cfg(target_arch = "x86_64")]
mod amx;
mod attention;
pub mod backend;
mod encoder;
mod engine;
mod error;
mod f32_amx;
pub mod f32_linear;
mod head;
mod host;
mod host_attention;
pub mod int8;
mod layers;
mod parallel;
#[doc(hidden)]
pub mod profile;
mod settings;
#[cfg(target_arch = "x86_64")]
mod tiles;
pub mod weights;

pub use engine::MlxEngine;
pub use error::{ForwardError, LoadError};
pub use settings::{DeviceKind, EngineSettings, Precision, SlidingAttention};

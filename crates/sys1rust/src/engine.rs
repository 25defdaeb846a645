//! Which engine runs the forward pass: `laya-cuda` on an NVIDIA GPU, `laya-mlx` everywhere
//! else (the CPU, Metal, and MLX's own CUDA backend when asked for). Both sit behind
//! [`Forward`]; this enum adds what the server reports about them.

use std::path::Path;

use anyhow::Context;
use clap::ValueEnum;
use laya_core::engine::{EngineError, Forward, Row, RowLogits};

/// `--engine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineChoice {
    /// laya-cuda when an NVIDIA GPU (compute capability 8.0+) and the CUDA 13 libraries are
    /// there and the device is not `cpu`; MLX otherwise.
    Auto,
    /// MLX (CPU, Metal, or MLX's CUDA backend).
    Mlx,
    /// The native NVIDIA engine; an error where it cannot run.
    Cuda,
}

/// A loaded forward pass.
pub enum AnyForward {
    Mlx(Box<laya_mlx::MlxEngine>),
    Cuda(Box<laya_cuda::CudaEngine>),
}

impl AnyForward {
    /// Loads the checkpoint in `dir` on the chosen engine.
    pub fn load(
        dir: &Path,
        choice: EngineChoice,
        device_cpu: bool,
        mlx: &laya_mlx::EngineSettings,
        cuda: &laya_cuda::CudaSettings,
    ) -> anyhow::Result<AnyForward> {
        let use_cuda = match choice {
            EngineChoice::Mlx => false,
            EngineChoice::Cuda => true,
            EngineChoice::Auto if device_cpu => false,
            EngineChoice::Auto => match laya_cuda::probe(cuda.ordinal) {
                Ok(gpu) => {
                    tracing::info!(%gpu, "NVIDIA GPU found: using the CUDA engine");
                    true
                }
                Err(e) => {
                    tracing::debug!(reason = %e, "CUDA engine not used");
                    false
                }
            },
        };
        if use_cuda {
            let engine =
                laya_cuda::CudaEngine::load(dir, cuda).context("starting the CUDA engine")?;
            Ok(AnyForward::Cuda(Box::new(engine)))
        } else {
            Ok(AnyForward::Mlx(Box::new(laya_mlx::MlxEngine::load(
                dir, mlx,
            )?)))
        }
    }

    /// The device in upstream's (PyTorch's) vocabulary, as `/health` reports it.
    pub fn device_name(&self) -> String {
        match self {
            AnyForward::Mlx(m) => m.device_name(),
            AnyForward::Cuda(_) => "cuda".to_owned(),
        }
    }

    /// The compute precision's name (`f32`, `f16`).
    pub fn precision_name(&self) -> &'static str {
        match self {
            AnyForward::Mlx(m) => m.precision().name(),
            AnyForward::Cuda(_) => "f16",
        }
    }

    /// Which engine this is, for logs and benchmark reports.
    pub fn engine_name(&self) -> &'static str {
        match self {
            AnyForward::Mlx(_) => "mlx",
            AnyForward::Cuda(_) => "cuda",
        }
    }

    /// Engine-specific preparation before the ready line: the CUDA engine captures its
    /// graph ladder. Returns whether it did anything (MLX warms by running forwards).
    pub fn warm(&mut self) -> anyhow::Result<bool> {
        match self {
            AnyForward::Mlx(_) => Ok(false),
            AnyForward::Cuda(c) => {
                for bucket in laya_cuda::engine::warm_ladder() {
                    c.warm(bucket).context("warming the CUDA graphs")?;
                }
                Ok(true)
            }
        }
    }
}

impl Forward for AnyForward {
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<RowLogits>, EngineError> {
        match self {
            AnyForward::Mlx(m) => m.forward(rows),
            AnyForward::Cuda(c) => c.forward(rows),
        }
    }
}

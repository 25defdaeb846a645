//! Which engine runs the forward pass: `laya-cuda` on an NVIDIA GPU, `laya-mlx` everywhere
//! else (the CPU, Metal, and MLX's own CUDA backend when asked for). This is the one place
//! that names the concrete engines; everything after loading sees a [`Forward`].

use std::path::Path;

use anyhow::Context;
use laya_core::agent::Agent;
use laya_core::engine::Forward;
use laya_mlx::{DeviceKind, EngineSettings, Precision, SlidingAttention};

use crate::cli::{CudaAttention, Device, EngineArgs, EngineChoice, Int8Activations, Sliding};

/// A loaded engine, whichever it is.
pub type AnyForward = Box<dyn Forward>;

impl EngineArgs {
    /// MLX's settings.
    pub fn mlx_settings(&self) -> EngineSettings {
        EngineSettings {
            device: match self.device {
                // int8 runs on the host, whatever device MLX's library would default to.
                _ if self.int8 => DeviceKind::Cpu,
                Device::Auto => DeviceKind::Default,
                Device::Cpu => DeviceKind::Cpu,
                Device::Gpu => DeviceKind::Gpu,
            },
            precision: if self.f32 || self.int8 {
                Some(Precision::F32)
            } else if self.f16 {
                Some(Precision::F16)
            } else {
                None
            },
            sliding_attention: match self.sliding_attention {
                Sliding::Auto => SlidingAttention::Auto,
                Sliding::Masked => SlidingAttention::Masked,
                Sliding::Blocked => SlidingAttention::Blocked,
            },
            int8: self.int8.then(|| {
                laya_mlx::int8::Int8::detect(match self.int8_activations {
                    Int8Activations::Int8 => laya_mlx::int8::Activations::Int8,
                    Int8Activations::Mixed => laya_mlx::int8::Activations::Mixed,
                    Int8Activations::Split => laya_mlx::int8::Activations::Split,
                })
            }),
            host_gemm: self.host_gemm,
            host_gemm_kernel: self.host_gemm_kernel,
            ..EngineSettings::default()
        }
    }

    /// The CUDA engine's settings.
    pub fn cuda_settings(&self) -> laya_cuda::CudaSettings {
        let mut s = laya_cuda::CudaSettings::default();
        if let Some(dir) = &self.kernel_cache {
            s.kernel_cache = Some(dir.clone());
        }
        s.ordinal = self.ordinal;
        s.graphs = self.cuda_graphs;
        s.gemm_tokens = self.cuda_gemm_tokens.max(1);
        s.gemm_long_tokens = self
            .cuda_gemm_large_tokens
            .iter()
            .copied()
            .filter(|&t| t > 0)
            .collect();
        s.gemm_short_tokens = self.cuda_gemm_small_tokens;
        s.gemm_own = self.cuda_gemm_own;
        s.gemm_own_tokens = self.cuda_gemm_own_tokens;
        s.attention = match self.cuda_attention {
            CudaAttention::Flash => laya_cuda::Attention::TensorCore,
            CudaAttention::Mma => laya_cuda::Attention::Mma,
            CudaAttention::Rows => laya_cuda::Attention::Rows,
        };
        s
    }

    /// The engine to load: `auto` never picks the CUDA engine for the CPU device, for f32 or
    /// for int8, which only MLX's CPU engine computes.
    fn choice(&self) -> anyhow::Result<EngineChoice> {
        if self.int8 {
            if self.engine == EngineChoice::Cuda || matches!(self.device, Device::Gpu) {
                anyhow::bail!(
                    "--int8 runs on the CPU: it takes neither --engine cuda nor --device gpu"
                );
            }
            return Ok(EngineChoice::Mlx);
        }
        match (self.engine, self.f32 || matches!(self.device, Device::Cpu)) {
            (EngineChoice::Cuda, true) => anyhow::bail!(
                "--engine cuda computes in f16 on the GPU: it takes neither --f32 nor --device cpu"
            ),
            (EngineChoice::Auto, true) => Ok(EngineChoice::Mlx),
            (choice, _) => Ok(choice),
        }
    }

    /// `--batch-tokens` when not given. A GPU pass costs about the same from one request to
    /// many, so queued requests fill long passes. On the CPU a pass's time grows with its
    /// tokens from a few hundred on: passes of short requests gain from sharing (measured:
    /// 1.4x the requests a second for one short question at 16 clients), longer shared
    /// passes gain nothing and only make the first requests wait for the last and hold more
    /// memory (ten questions over 512 tokens, six clients: 2,180 MiB against 1,800 alone).
    pub fn default_pass_tokens(&self) -> anyhow::Result<usize> {
        Ok(if self.use_cuda()? { 32768 } else { 4096 })
    }

    /// These arguments with `--engine auto` replaced by the engine it picks. A command that
    /// asks the engine choice several times (the server: its workers, its pass budget, each
    /// load) settles it first, so the GPU is probed, and the choice logged, once.
    pub fn settled(self) -> anyhow::Result<EngineArgs> {
        let engine = if self.use_cuda()? {
            EngineChoice::Cuda
        } else {
            EngineChoice::Mlx
        };
        Ok(EngineArgs { engine, ..self })
    }

    /// Whether the checkpoints load on the CUDA engine (asked for, or `auto` on an NVIDIA GPU).
    fn use_cuda(&self) -> anyhow::Result<bool> {
        Ok(match self.choice()? {
            EngineChoice::Mlx => false,
            EngineChoice::Cuda => true,
            EngineChoice::Auto => match laya_cuda::probe(self.ordinal) {
                Ok(gpu) => {
                    tracing::info!(%gpu, "NVIDIA GPU found: using the CUDA engine");
                    true
                }
                Err(e) => {
                    tracing::debug!(reason = %e, "CUDA engine not used");
                    false
                }
            },
        })
    }

    /// The GPU ordinal of each engine worker (`--gpus`): every visible GPU by default on the
    /// CUDA engine, one worker on MLX.
    pub fn workers(&self) -> anyhow::Result<Vec<usize>> {
        let listed = self
            .gpus
            .as_deref()
            .map(str::trim)
            .filter(|g| !g.is_empty() && *g != "all");
        if !self.use_cuda()? {
            return match listed {
                Some(list) if list != "0" => {
                    anyhow::bail!(
                        "--gpus {list}: one engine per GPU needs the CUDA engine (--engine cuda)"
                    )
                }
                _ => Ok(vec![0]),
            };
        }
        match listed {
            None => {
                let count = laya_cuda::device_count().context("counting the GPUs")?;
                Ok((0..count.max(1)).collect())
            }
            Some(list) => list
                .split(',')
                .map(|o| {
                    o.trim()
                        .parse::<usize>()
                        .with_context(|| format!("--gpus {list}: {o:?} is not a GPU ordinal"))
                })
                .collect(),
        }
    }

    /// These arguments for the worker on GPU `ordinal`.
    pub fn on_gpu(&self, ordinal: usize) -> EngineArgs {
        EngineArgs {
            ordinal,
            ..self.clone()
        }
    }

    /// What a checkpoint loaded with these arguments would report, before any is loaded
    /// (`/health` with nothing resident names the device a load would use).
    pub fn preview(&self) -> laya_core::engine::EngineInfo {
        if self.use_cuda().unwrap_or(false) {
            return laya_core::engine::EngineInfo {
                engine: "cuda",
                device: "cuda".into(),
                precision: "f16",
            };
        }
        let gpu = !self.int8
            && !matches!(self.device, Device::Cpu)
            && laya_mlx::backend::BACKEND != "cpu";
        let device = match (gpu, laya_mlx::backend::BACKEND) {
            (true, "metal") => "mps",
            (true, _) => "cuda",
            (false, _) => "cpu",
        };
        let f32 = self.f32 || (!gpu && !self.f16);
        laya_core::engine::EngineInfo {
            engine: "mlx",
            device: device.into(),
            precision: match (self.int8, f32) {
                (true, _) => match self.int8_activations {
                    Int8Activations::Int8 => "int8",
                    Int8Activations::Mixed => "int8-mixed",
                    Int8Activations::Split => "int8-split",
                },
                (false, true) => "f32",
                (false, false) => "f16",
            },
        }
    }

    /// Loads the forward pass of the checkpoint in `dir` on the chosen engine.
    pub fn load_forward(&self, dir: &Path) -> anyhow::Result<AnyForward> {
        let cuda = self.cuda_settings();
        if self.use_cuda()? {
            let engine =
                laya_cuda::CudaEngine::load(dir, &cuda).context("starting the CUDA engine")?;
            Ok(Box::new(engine))
        } else {
            Ok(Box::new(laya_mlx::MlxEngine::load(
                dir,
                &self.mlx_settings(),
            )?))
        }
    }

    /// Loads the whole checkpoint: the engine, then its tokenizer and configs.
    pub fn load_agent(&self, dir: &Path) -> anyhow::Result<Agent<AnyForward>> {
        let forward = self
            .load_forward(dir)
            .with_context(|| format!("loading the model in {}", dir.display()))?;
        Agent::load(dir, forward)
            .with_context(|| format!("loading the tokenizer and configs in {}", dir.display()))
    }
}

#[cfg(test)]
mod tests {
    use crate::cli::serve_engine_args as engine_args;

    /// The shared-pass budget follows the engine when `--batch-tokens` is not given: long
    /// passes on the CUDA engine, passes of a few thousand tokens on the CPU.
    #[test]
    fn the_pass_budget_follows_the_engine() {
        let budget = |args: &[&str]| engine_args(args).default_pass_tokens().ok();
        assert_eq!(budget(&["--engine", "mlx"]), Some(4096));
        assert_eq!(budget(&["--int8"]), Some(4096));
        assert_eq!(budget(&["--device", "cpu"]), Some(4096));
        assert_eq!(budget(&["--engine", "cuda"]), Some(32768));
    }

    /// Our own GEMM kernels default to the engine's own settings (on, for passes of 2,048
    /// tokens or more), and both settings reach the engine when given.
    #[test]
    fn own_gemm_kernels_default_to_long_passes_and_turn_off() {
        let defaults = laya_cuda::CudaSettings::default();
        let settings = engine_args(&[]).cuda_settings();
        assert_eq!(
            (settings.gemm_own, settings.gemm_own_tokens),
            (defaults.gemm_own, defaults.gemm_own_tokens)
        );
        assert_eq!((settings.gemm_own, settings.gemm_own_tokens), (true, 2048));
        let settings =
            engine_args(&["--cuda-gemm-own=false", "--cuda-gemm-own-tokens", "0"]).cuda_settings();
        assert_eq!((settings.gemm_own, settings.gemm_own_tokens), (false, 0));
        // Default on: only an explicit no turns it off, an unknown word does not.
        let own = |flag: &str| engine_args(&[flag]).cuda_settings().gemm_own;
        assert!(!own("--cuda-gemm-own=off"));
        assert!(own("--cuda-gemm-own=enabled"));
    }

    /// Settling `auto` keeps an explicit choice, and never turns what only MLX computes
    /// (the CPU device, f32, int8) into the CUDA engine, whether or not a GPU is here.
    #[test]
    fn settling_keeps_what_only_mlx_computes_on_mlx() {
        use crate::cli::EngineChoice;
        let settled = |args: &[&str]| engine_args(args).settled().map(|a| a.engine).ok();
        assert_eq!(settled(&["--engine", "mlx"]), Some(EngineChoice::Mlx));
        assert_eq!(settled(&["--engine", "cuda"]), Some(EngineChoice::Cuda));
        assert_eq!(settled(&["--int8"]), Some(EngineChoice::Mlx));
        assert_eq!(settled(&["--f32"]), Some(EngineChoice::Mlx));
        assert_eq!(settled(&["--device", "cpu"]), Some(EngineChoice::Mlx));
        assert_eq!(settled(&["--engine", "cuda", "--f32"]), None);
        let auto = settled(&[]).expect("auto settles");
        assert_ne!(auto, EngineChoice::Auto);
        assert_eq!(
            engine_args(&[])
                .settled()
                .and_then(|a| a.settled())
                .map(|a| a.engine)
                .ok(),
            Some(auto),
            "settling twice keeps the first choice"
        );
    }
}

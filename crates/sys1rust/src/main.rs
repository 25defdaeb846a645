//! `sys1rust`: Laya System 1 decision models on MLX, and on NVIDIA GPUs natively.

mod bench;
mod decide;
mod engine;
mod http;
mod models;
mod serve;
mod server;
mod tournament;
mod worker;

use std::path::Path;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use engine::{AnyForward, EngineChoice};
use laya_mlx::{DeviceKind, EngineSettings, Precision, SlidingAttention};

#[derive(Parser)]
#[command(
    name = "sys1rust",
    version,
    about = "Serve Laya System 1 decision models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the model over HTTP, wire-compatible with laya-serve 0.4.15's /v1/systemone API.
    Serve(Box<serve::ServeArgs>),
    /// Answer one `/v1/systemone` request body (a file, or stdin) and print upstream's result JSON.
    Decide(decide::DecideArgs),
    /// Time loading and answering a workload in-process (see bench/).
    Bench(bench::BenchArgs),
    /// Download a model into the Hugging Face cache (verified, resumable).
    Pull(models::PullArgs),
    /// List the models in the cache.
    Models,
}

/// Where the model is and how it runs.
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A model name (typed-decisions, multilingual, english, or an alias), a Hugging Face repo
    /// id, or a local checkpoint directory (used in place).
    #[arg(long, env = "SYS1_MODEL", default_value = laya_hub::DEFAULT_MODEL)]
    pub model: String,
    /// Serve another cached revision (a commit or its prefix; the pin's 7-character prefix
    /// means the pin).
    #[arg(long, env = "SYS1_REVISION")]
    pub revision: Option<String>,
    /// Never download (also HF_HUB_OFFLINE=1): a model missing from the cache is an error.
    #[arg(long)]
    pub offline: bool,
    /// Compute in f32 (the default on the CPU, where MLX has no fast f16 matmul).
    #[arg(long, env = "SYS1_F32", conflicts_with = "f16", default_value = "false", value_parser = serve::truthy, num_args = 0..=1, default_missing_value = "true")]
    pub f32: bool,
    /// Compute in f16 (the default on a GPU).
    #[arg(long)]
    pub f16: bool,
    /// Device that runs the forward pass.
    #[arg(long, value_enum, default_value_t = Device::Auto, env = "SYS1_DEVICE")]
    pub device: Device,
    /// How sliding-window layers attend: auto (on the CPU query blocks for rows of 256 tokens
    /// or more, on a GPU the full masked scores), always the full masked scores (masked), or
    /// always query blocks (blocked). Same answers; a speed knob.
    #[arg(long, value_enum, default_value_t = Sliding::Auto, env = "SYS1_SLIDING_ATTENTION")]
    pub sliding_attention: Sliding,
    /// Which engine runs the forward pass: auto (the native CUDA engine on an NVIDIA GPU, MLX
    /// elsewhere), mlx, or cuda.
    #[arg(long, value_enum, default_value_t = EngineChoice::Auto, env = "SYS1_ENGINE")]
    pub engine: EngineChoice,
    /// Where the CUDA engine caches its compiled kernels (serve's --kernel-cache).
    #[arg(skip)]
    pub cuda_kernel_cache: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Sliding {
    Auto,
    Masked,
    Blocked,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Device {
    /// The GPU when libmlx has one (Metal, CUDA), else the CPU.
    Auto,
    Cpu,
    Gpu,
}

impl ModelArgs {
    pub fn settings(&self) -> EngineSettings {
        EngineSettings {
            device: match self.device {
                Device::Auto => DeviceKind::Default,
                Device::Cpu => DeviceKind::Cpu,
                Device::Gpu => DeviceKind::Gpu,
            },
            precision: if self.f32 {
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
            ..EngineSettings::default()
        }
    }

    /// The CUDA engine's settings (environment knobs for benchmarks and diagnosis:
    /// `SYS1_CUDA_GRAPHS=0`, `SYS1_CUDA_ATTENTION=rows`).
    pub fn cuda_settings(&self) -> laya_cuda::CudaSettings {
        let mut s = laya_cuda::CudaSettings::default();
        if let Some(dir) = &self.cuda_kernel_cache {
            s.kernel_cache = Some(dir.clone());
        }
        if std::env::var("SYS1_CUDA_GRAPHS")
            .is_ok_and(|v| matches!(v.as_str(), "0" | "false" | "off"))
        {
            s.graphs = false;
        }
        if std::env::var("SYS1_CUDA_ATTENTION").is_ok_and(|v| v == "rows") {
            s.attention = laya_cuda::Attention::Rows;
        }
        s
    }

    /// The engine to load: `auto` never picks the CUDA engine for the CPU device or for f32,
    /// which only MLX computes.
    fn engine_choice(&self) -> anyhow::Result<EngineChoice> {
        match (self.engine, self.f32 || matches!(self.device, Device::Cpu)) {
            (EngineChoice::Cuda, true) => anyhow::bail!(
                "--engine cuda computes in f16 on the GPU: it takes neither --f32 nor --device cpu"
            ),
            (EngineChoice::Auto, true) => Ok(EngineChoice::Mlx),
            (choice, _) => Ok(choice),
        }
    }

    /// Finds the checkpoint directory, downloading the model once if it is not cached.
    pub fn resolve(&self) -> anyhow::Result<laya_hub::ResolvedModel> {
        let hub = laya_hub::Hub::from_env().context("reading the Hugging Face settings")?;
        let progress = laya_hub::stderr_progress();
        hub.resolve(&self.model, self.revision.as_deref(), self.offline, &*progress).with_context(|| {
            format!(
                "cannot get model {:?}. Where Hugging Face cannot be reached, serve a local checkpoint \
                 directory instead: --model DIR (rl_agent_config.json, model.safetensors, encoder/, tokenizer/)",
                self.model
            )
        })
    }

    /// Loads the engine from a resolved checkpoint directory.
    pub fn load_dir(
        &self,
        dir: &Path,
    ) -> anyhow::Result<laya_core::engine_api::Engine<AnyForward>> {
        let choice = self.engine_choice()?;
        let forward = AnyForward::load(
            dir,
            choice,
            matches!(self.device, Device::Cpu),
            &self.settings(),
            &self.cuda_settings(),
        )
        .with_context(|| format!("loading the model in {}", dir.display()))?;
        laya_core::engine_api::Engine::load(dir, forward)
            .with_context(|| format!("loading the tokenizer and configs in {}", dir.display()))
    }

    /// Resolves and loads.
    pub fn load(&self) -> anyhow::Result<laya_core::engine_api::Engine<AnyForward>> {
        let resolved = self.resolve()?;
        self.load_dir(&resolved.dir)
    }
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    // Before anything touches MLX (and before any thread exists).
    for (name, value) in laya_mlx::backend::configure_process() {
        tracing::debug!(name, value, "MLX setting");
    }
    // A panic here must still leave through `exit` (the hook has printed it already).
    let result = std::panic::catch_unwind(move || match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Decide(args) => decide::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Pull(args) => models::pull(&args),
        Command::Models => models::list(),
    })
    .unwrap_or_else(|_| laya_mlx::backend::exit(101));
    // As `fn main() -> Result` would report it, then an exit that skips MLX's teardown.
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("Error: {e:?}");
            1
        }
    };
    laya_mlx::backend::exit(code)
}

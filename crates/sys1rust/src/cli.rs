//! The command line: every flag, each with the environment variable it falls back to. This
//! is the only place configuration is read; [`crate::config`] turns it into the settings the
//! server runs with.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::logging::LogFormat;

/// `sys1rust`.
#[derive(Parser)]
#[command(
    name = "sys1rust",
    version = crate::VERSION,
    about = "Serve Laya System 1 decision models"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// How log lines look on stderr: text for people, json (one object per line) for log
    /// collectors.
    #[arg(long, global = true, value_enum, env = "SYS1_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Least severe level logged: critical, error, warning, info, debug or trace (default
    /// info; also upstream's LAYA_LOG_LEVEL, read as upstream reads it). RUST_LOG, when set,
    /// wins with a full filter.
    #[arg(long, global = true, env = "SYS1_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Upstream's variable, used when --log-level (SYS1_LOG_LEVEL) is not given; read here so
    /// that configuration is read in one place.
    #[arg(long, global = true, hide = true, env = "LAYA_LOG_LEVEL")]
    pub laya_log_level: Option<String>,
    /// A full tracing filter that overrides the level (tracing's convention).
    #[arg(long, global = true, hide = true, env = "RUST_LOG")]
    pub rust_log: Option<String>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Serve the model over HTTP, wire-compatible with laya-serve 0.4.15's /v1/systemone API.
    Serve(Box<ServeArgs>),
    /// Answer one `/v1/systemone` request body (a file, or stdin) and print the server's answer.
    Decide(DecideArgs),
    /// Time loading and answering a workload in-process (see bench/).
    Bench(BenchArgs),
    /// Download a model into the Hugging Face cache (verified, resumable).
    ///
    /// Files come from HF_ENDPOINT (default https://huggingface.co), with HF_TOKEN as the
    /// bearer when set (sent to that endpoint only), into $HF_HOME/hub (or HF_HUB_CACHE), the
    /// cache huggingface_hub and laya read too. HF_HUB_OFFLINE=1 only verifies what is cached.
    Pull(PullArgs),
    /// List the models in the cache.
    Models(ModelsArgs),
    /// Show one model: its pin, files (sizes, hashes, what is cached), path and configs.
    Show(ShowArgs),
    /// Delete a model from the cache (every cached revision); refused while a server uses it.
    Rm(RmArgs),
    /// Show what a running server has loaded, on which device (from its /health).
    Ps(PsArgs),
    /// Print a shell completion script: `sys1rust completions bash > ~/.local/share/bash-completion/completions/sys1rust`.
    Completions(CompletionsArgs),
    /// Ask a running server whether it answers (for container health checks): exit 0 when
    /// the URL answers 200 within the timeout, 1 otherwise.
    Health(HealthArgs),
}

/// `sys1rust models`.
#[derive(Args, Debug)]
pub struct ModelsArgs {
    /// One JSON object per cached snapshot, in an array (name, repo, revision, pinned, size
    /// in bytes, complete, path).
    #[arg(long)]
    pub json: bool,
}

/// `sys1rust show`.
#[derive(Args, Debug)]
pub struct ShowArgs {
    /// A model name (or alias), a Hugging Face repo id, or a checkpoint directory.
    pub model: String,
    /// A cached revision other than the pin (a branch, tag or commit prefix).
    #[arg(long)]
    pub revision: Option<String>,
    /// One JSON object: the fields shown, with both config files in full.
    #[arg(long)]
    pub json: bool,
}

/// `sys1rust rm`.
#[derive(Args, Debug)]
pub struct RmArgs {
    /// A model name (or alias) or a Hugging Face repo id.
    pub model: String,
    /// Do not ask; needed when stdin is not a terminal.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `sys1rust ps`.
#[derive(Args, Debug)]
pub struct PsArgs {
    /// The server's address.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,
    /// The server's API key, when it has one.
    #[arg(long, env = "LAYA_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 5.0)]
    pub timeout: f64,
}

/// `sys1rust completions`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

/// `sys1rust health`.
#[derive(Args, Debug)]
pub struct HealthArgs {
    /// The URL to ask (plain http); without it, `/health` on 127.0.0.1 at the port `serve`
    /// binds without `--port`: `LAYA_PORT`, else 8000.
    #[arg(long)]
    pub url: Option<String>,
    /// Upstream's `LAYA_PORT`, read as `serve` reads it.
    #[arg(long, env = "LAYA_PORT", hide = true)]
    pub laya_port: Option<String>,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 5.0)]
    pub timeout: f64,
}

/// Where the model is and how it runs.
#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    /// A model name (typed-decisions, multilingual, english, or an alias), a Hugging Face repo
    /// id, or a local checkpoint directory (used in place). `serve` without it holds upstream's
    /// three checkpoints and answers each request with the one its router picks; the other
    /// commands take typed-decisions.
    #[arg(long, env = "SYS1_MODEL")]
    pub model: Option<String>,
    /// Use another cached revision (a commit or its prefix; the pin's 7-character prefix
    /// means the pin).
    #[arg(long, env = "SYS1_REVISION")]
    pub revision: Option<String>,
    /// Never download: a model missing from the cache is an error.
    #[arg(long, env = "HF_HUB_OFFLINE", action = clap::ArgAction::SetTrue, value_parser = truthy)]
    pub offline: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// How the forward pass runs.
#[derive(Args, Clone, Debug)]
pub struct EngineArgs {
    /// Compute in f32 (the default on the CPU, where MLX has no fast f16 matmul).
    #[arg(long, env = "SYS1_F32", conflicts_with = "f16", action = clap::ArgAction::SetTrue, value_parser = truthy)]
    pub f32: bool,
    /// Compute in f16 (the default on a GPU).
    #[arg(long, env = "SYS1_F16", action = clap::ArgAction::SetTrue, value_parser = truthy)]
    pub f16: bool,
    /// CPU only, never the default: the encoder's linear layers with int8 weights (per
    /// output channel) and int8 activations (per row), the feed-forward output projection,
    /// the decision head and everything else in f32. Faster, and answers move: see the
    /// README for the agreement with f32 measured.
    #[arg(long, env = "SYS1_INT8", conflicts_with = "f16", action = clap::ArgAction::SetTrue, value_parser = truthy)]
    pub int8: bool,
    /// With --int8: activations rounded once to int8 (int8, the fast one), or twice, the
    /// second time what the first left (split: two integer GEMMs, about weight-only int8's
    /// answers, slower), or twice only where the rounding moves answers (mixed: the attention
    /// output and feed-forward input layers; split's answers on the fixtures, less work).
    #[arg(long, value_enum, default_value_t = Int8Activations::Int8, env = "SYS1_INT8_ACTIVATIONS", requires = "int8")]
    pub int8_activations: Int8Activations,
    /// MLX engine on the CPU in f32: the linear layers on sys1rust's own GEMM kernels, on
    /// weights packed at load (true, the default where the CPU has AVX2 and FMA), or on
    /// MLX's (false; for comparison).
    #[arg(long, env = "SYS1_HOST_GEMM", hide = true)]
    pub host_gemm: Option<bool>,
    /// The host GEMMs' kernel: amx-bf16 (the default where the CPU has AMX), avx512 or
    /// avx2-fma (for comparison).
    #[arg(long, env = "SYS1_HOST_GEMM_KERNEL", hide = true)]
    pub host_gemm_kernel: Option<laya_mlx::f32_linear::Kernel>,
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
    /// CUDA engine: the GPUs to serve on, one engine worker (with its own copy of the
    /// checkpoints) each, every request sent to the least loaded: `all` (the default, every
    /// visible GPU) or device ordinals such as `0,1`; an ordinal may repeat (two workers on
    /// one GPU). MLX runs one worker.
    #[arg(long, env = "SYS1_GPUS")]
    pub gpus: Option<String>,
    /// The GPU this worker's engine runs on (set per worker from --gpus).
    #[arg(skip)]
    pub ordinal: usize,
    /// CUDA engine: replay CUDA graphs (off launches kernel by kernel; for diagnosis).
    #[arg(long, env = "SYS1_CUDA_GRAPHS", default_value = "true", value_parser = truthy_default_on, hide = true)]
    pub cuda_graphs: bool,
    /// CUDA engine: `mma` runs the mma.sync flash attention on Hopper too, instead of the
    /// wgmma one (for comparison); `rows` the plain reference attention (slow; for diagnosis).
    #[arg(long, value_enum, env = "SYS1_CUDA_ATTENTION", default_value_t = CudaAttention::Flash, hide = true)]
    pub cuda_attention: CudaAttention,
    /// CUDA engine: the pass size (tokens) whose GEMM kernels every pass uses, so that a row's
    /// answer does not depend on its batch mates (for tuning).
    #[arg(
        long,
        env = "SYS1_CUDA_GEMM_TOKENS",
        default_value_t = 512,
        hide = true
    )]
    pub cuda_gemm_tokens: usize,
    /// CUDA engine: pass sizes (tokens, comma-separated, ascending) whose GEMM kernels passes
    /// of at least half as many tokens use, for each layer where they give the same bits as
    /// the short passes' kernels (0: the same kernels for every pass).
    #[arg(
        long,
        env = "SYS1_CUDA_GEMM_LARGE_TOKENS",
        value_delimiter = ',',
        default_value = "2048",
        hide = true
    )]
    pub cuda_gemm_large_tokens: Vec<usize>,
    /// CUDA engine: passes of at most this many tokens take, for each size, the fastest GEMM
    /// kernels there that give the same bits as the others, timed while warming up (0: none).
    #[arg(
        long,
        env = "SYS1_CUDA_GEMM_SMALL_TOKENS",
        default_value_t = 6144,
        hide = true
    )]
    pub cuda_gemm_small_tokens: usize,
    /// CUDA engine: on Hopper, timed passes may also take our own GEMM kernels, alone or
    /// with GeGLU or RoPE in their epilogue, where they give the same bits as cuBLASLt's
    /// kernel and the separate step and are faster (on, laya-cuda's default; only 0, false,
    /// no or off turn it off, as with the other default-on switches).
    #[arg(long, env = "SYS1_CUDA_GEMM_OWN", default_value = "true", value_parser = truthy_default_on, num_args = 0..=1, default_missing_value = "true", hide = true)]
    pub cuda_gemm_own: bool,
    /// CUDA engine: with our own GEMM kernels on, only passes of at least this many tokens
    /// time them (0: every pass; laya-cuda's default).
    #[arg(
        long,
        env = "SYS1_CUDA_GEMM_OWN_TOKENS",
        default_value_t = 2048,
        hide = true
    )]
    pub cuda_gemm_own_tokens: usize,
    /// Persistent directory for compiled GPU kernels (serve's --kernel-cache).
    #[arg(skip)]
    pub kernel_cache: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Sliding {
    Auto,
    Masked,
    Blocked,
}

/// `--int8-activations`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Int8Activations {
    Int8,
    Mixed,
    Split,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Device {
    /// The GPU when libmlx has one (Metal, CUDA), else the CPU.
    Auto,
    Cpu,
    Gpu,
}

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

/// `SYS1_CUDA_ATTENTION`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CudaAttention {
    Flash,
    Mma,
    Rows,
}

/// `sys1rust serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to bind.
    #[arg(long, env = "LAYA_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to bind; 0 picks a free port (the ready line says which). Without it,
    /// `LAYA_PORT` under upstream's rule (blank is 8000; anything but 1-65535 refuses to
    /// start), else 8000.
    #[arg(long)]
    pub port: Option<u16>,
    /// Upstream's `LAYA_PORT`, read as given for its rule (`laya_core::request::laya_port`).
    #[arg(long, hide = true, env = "LAYA_PORT")]
    pub laya_port: Option<String>,
    /// Require `Authorization: Bearer <key>` on the decision routes (and /metrics).
    #[arg(long, env = "LAYA_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Decision requests admitted at once (one runs, the rest queue); more get 503.
    #[arg(long, env = "LAYA_MAX_CONCURRENT", default_value = "16", value_parser = |s: &str| Ok::<usize, std::convert::Infallible>(laya_core::request::positive_int_or(Some(s), 16)))]
    pub max_concurrent: usize,
    /// Tokens one shared forward pass may hold when queued requests run together, on an
    /// engine whose answers do not depend on their batch mates (the CUDA engine; the CPU
    /// engine on its host kernels); 0 runs every request alone. Nothing waits for a batch to
    /// fill. Default: 32768 on the CUDA engine, 4096 on the CPU.
    #[arg(long, env = "SYS1_BATCH_TOKENS")]
    pub batch_tokens: Option<usize>,
    /// Jev's contract: only its keys, its confidence, its error shapes, `GET /v1/models`.
    #[arg(long, env = "LAYA_JEV_STRICT", default_value = "false", value_parser = truthy, num_args = 0..=1, default_missing_value = "true")]
    pub jev_strict: bool,
    /// Seconds to receive a whole request body (408 after).
    #[arg(long, env = "LAYA_BODY_READ_TIMEOUT", default_value = "10", value_parser = |s: &str| Ok::<f64, std::convert::Infallible>(seconds_or(s, 10.0)))]
    pub body_timeout: f64,
    /// Largest `max_len` / `head_max_len` a request may ask for.
    #[arg(long, env = "LAYA_MAX_TOKEN_BUDGET", default_value = "8192", value_parser = |s: &str| Ok::<usize, std::convert::Infallible>(laya_core::request::positive_int_or(Some(s), laya_core::request::DEFAULT_MAX_TOKEN_BUDGET)))]
    pub max_token_budget: usize,
    /// Most windows one state may be read in with `"overflow": "windows"` (the cap on a
    /// request's `max_windows`); a state that needs more is refused with 422 before any
    /// forward pass.
    #[arg(long, env = "SYS1_MAX_WINDOWS", default_value_t = laya_core::request::DEFAULT_MAX_WINDOWS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_windows: usize,
    /// Token budget of one batch forward pass (larger batches are split, never refused).
    #[arg(long, env = "LAYA_MAX_BATCH_TOKENS", default_value = "131072", value_parser = |s: &str| Ok::<usize, std::convert::Infallible>(laya_core::request::positive_int_or(Some(s), laya_core::request::DEFAULT_MAX_BATCH_TOKENS)))]
    pub max_batch_tokens: usize,
    /// Routing fallback for states without language evidence (english, multilingual, typed-decisions).
    #[arg(long, env = "LAYA_DEFAULT_MODEL", default_value = "multilingual")]
    pub default_model: String,
    /// Answer a choice with more options than this by elimination in groups of this size
    /// (2-100; anything else is off), which also raises the per-choice cap to 255. Off by
    /// default, except with --jev-strict, where it is 100 (Jev takes choices of up to 255
    /// options; one pass still answers up to 100).
    #[arg(long, env = "LAYA_TOURNAMENT_GROUP", value_parser = |s: &str| Ok::<usize, std::convert::Infallible>(laya_core::request::tournament_group(Some(s))))]
    pub tournament_group: Option<usize>,
    /// Route requests whose question ids match a typed-decisions workflow to typed-decisions.
    #[arg(long, env = "LAYA_AUTO_TASK", default_value = "false", value_parser = truthy, num_args = 0..=1, default_missing_value = "true")]
    pub auto_task: bool,
    /// The source string `routing.repo` reports (default: the model's repo id or directory name).
    #[arg(long, env = "SYS1_REPO_LABEL")]
    pub repo_label: Option<String>,
    #[command(flatten)]
    pub router: RouterArgs,
    /// Most open connections. At the cap a new connection takes the place of an idle one
    /// (one that never sent a whole request first, else the one idle longest, after at least
    /// a second), which is closed; it is closed at once only when none is idle.
    #[arg(long, env = "SYS1_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers.
    #[arg(long, env = "SYS1_HEADER_TIMEOUT", default_value_t = 10.0)]
    pub header_timeout: f64,
    /// Seconds an idle keep-alive connection stays open (at most --header-timeout, whose timer
    /// also runs while a connection waits for its next request).
    #[arg(long, env = "SYS1_KEEP_ALIVE_TIMEOUT", default_value_t = 5.0)]
    pub keep_alive_timeout: f64,
    /// Seconds a response may wait for the client to read it; a connection whose client reads
    /// nothing for that long is closed.
    #[arg(long, env = "SYS1_WRITE_TIMEOUT", default_value_t = 10.0)]
    pub write_timeout: f64,
    /// Seconds a shutdown (SIGINT/SIGTERM) waits for in-flight requests before it gives up and
    /// exits with a failure status.
    #[arg(long, env = "SYS1_SHUTDOWN_GRACE", default_value_t = 30.0)]
    pub shutdown_grace: f64,
    /// Seconds the server keeps accepting requests after SIGINT/SIGTERM, `/ready` already
    /// answering 503, so that load balancers move traffic away before the port closes; the
    /// shutdown grace period starts after it.
    #[arg(long, env = "SYS1_DRAIN_DELAY", default_value_t = 0.0)]
    pub drain_delay: f64,
    /// Seconds a decision request may take from admission to its answer, queue wait included;
    /// past it the answer is 504 (0: no limit, as upstream).
    #[arg(long, env = "SYS1_REQUEST_TIMEOUT", default_value_t = 0.0)]
    pub request_timeout: f64,
    /// Persistent directory for compiled GPU kernels, so a restarted server skips the
    /// run-time compilation a first start pays: MLX's (MLX_PTX_CACHE_DIR; default
    /// $XDG_CACHE_HOME/sys1rust/mlx or ~/.cache/sys1rust/mlx; an exported MLX_PTX_CACHE_DIR
    /// wins over the default, not over this option) and the CUDA engine's cubins (default
    /// ~/.cache/sys1rust/kernels).
    #[arg(long, env = "SYS1_KERNEL_CACHE")]
    pub kernel_cache: Option<PathBuf>,
    /// MLX's own kernel cache variable, when an operator exported it.
    #[arg(long, env = "MLX_PTX_CACHE_DIR", hide = true)]
    pub mlx_ptx_cache_dir: Option<PathBuf>,
}

/// The router (no `--model`): upstream's checkpoint registry and residency settings.
#[derive(Args, Clone, Debug)]
pub struct RouterArgs {
    /// Checkpoints beside (or instead of) the built-in ones, as JSON `{name: source}`; a source
    /// is a Hugging Face repo id, a local directory (relative to the working directory) or
    /// `["repo", "subfolder"]`. A built-in name re-points that checkpoint.
    #[arg(long, env = "LAYA_EXTRA_MODELS")]
    pub extra_models: Option<String>,
    /// Load the checkpoints at start (`1`, `true`, `yes`, `on`; anything else is off), not when
    /// a request first needs them.
    #[arg(long, env = "LAYA_PRELOAD", default_value = "true", value_parser = truthy_or_true)]
    pub preload: bool,
    /// The checkpoints to preload, comma-separated names or aliases (default: all).
    #[arg(long, env = "LAYA_MODELS")]
    pub models: Option<String>,
    /// Most checkpoints resident at once (anything but a positive integer: 2), raised to fit
    /// what was preloaded; the least recently used is unloaded first.
    #[arg(long, env = "LAYA_MAX_LOADED", default_value = "2", value_parser = max_loaded)]
    pub max_loaded: usize,
    /// Unload every checkpoint after this many seconds without a request (0: never).
    #[arg(long, env = "LAYA_IDLE_UNLOAD_SECONDS", default_value = "0", value_parser = idle_seconds)]
    pub idle_unload_seconds: f64,
}

/// `sys1rust decide`.
#[derive(Args, Debug)]
pub struct DecideArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The request body (`{"state": ..., "questions": {...}}`); `-` or nothing reads stdin.
    pub request: Option<PathBuf>,
}

/// `sys1rust bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A workload file (JSONL, lines `{"id", "body"}` as in shared/seed-workloads).
    #[arg(long)]
    pub workload: PathBuf,
    /// Request id prefixes to time, e.g. `s128_q1,s512_q10` (all lines whose id starts so);
    /// none times every id group (the id up to its last `_`).
    #[arg(long, value_delimiter = ',')]
    pub shapes: Vec<String>,
    /// Timed requests per shape (cycling through that shape's lines).
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// Untimed requests per shape before timing.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
}

/// `sys1rust pull`.
#[derive(Args, Debug)]
pub struct PullArgs {
    /// Model name, alias or Hugging Face repo id (default: the checkpoints `serve` would
    /// preload, `LAYA_MODELS` or all three).
    pub model: Option<String>,
    /// The checkpoints to pull when no model is named (`serve`'s preload list).
    #[arg(long, env = "LAYA_MODELS", hide = true)]
    pub models: Option<String>,
    /// The extra checkpoints `serve` would register (`LAYA_EXTRA_MODELS`).
    #[arg(long, env = "LAYA_EXTRA_MODELS", hide = true)]
    pub extra_models: Option<String>,
    /// A revision other than the pin (commit, prefix or branch).
    #[arg(long)]
    pub revision: Option<String>,
}

/// Upstream's boolean environment rule: `1`, `true`, `yes`, `on` (any case) are true.
pub fn truthy(s: &str) -> Result<bool, std::convert::Infallible> {
    Ok(matches!(
        s.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    ))
}

/// Upstream's `_env_bool(name, True)`: blank is the default (true), else [`truthy`].
fn truthy_or_true(s: &str) -> Result<bool, std::convert::Infallible> {
    if s.trim().is_empty() {
        return Ok(true);
    }
    truthy(s)
}

/// `LAYA_MAX_LOADED`: a positive integer, anything else the router's default of 2.
fn max_loaded(s: &str) -> Result<usize, std::convert::Infallible> {
    Ok(laya_core::request::positive_int_or(Some(s), 2))
}

/// `LAYA_IDLE_UNLOAD_SECONDS`: a positive, finite number of seconds, anything else off (0).
fn idle_seconds(s: &str) -> Result<f64, std::convert::Infallible> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Ok(0.0),
    }
}

/// A switch that is on unless set to `0`, `false`, `no` or `off`.
fn truthy_default_on(s: &str) -> Result<bool, std::convert::Infallible> {
    Ok(!matches!(
        s.trim().to_ascii_lowercase().as_str(),
        "0" | "false" | "no" | "off"
    ))
}

/// A positive, finite number of seconds; anything else is `default` (upstream's rule for
/// `LAYA_BODY_READ_TIMEOUT`).
fn seconds_or(s: &str, default: f64) -> f64 {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => v,
        _ => default,
    }
}

/// The engine arguments `sys1rust serve ARGS` parses to, for the tests of the modules that
/// read them.
#[cfg(test)]
pub(crate) fn serve_engine_args(args: &[&str]) -> EngineArgs {
    use clap::Parser;
    let argv = ["sys1rust", "serve"].iter().chain(args).copied();
    match Cli::try_parse_from(argv).expect("arguments parse").command {
        Command::Serve(serve) => serve.model.engine,
        _ => unreachable!("a serve command"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_number_rules() {
        assert!(truthy(" YES ").unwrap_or(false));
        assert!(!truthy("2").unwrap_or(true));
        assert!(!truthy_default_on("off").unwrap_or(true));
        assert!(truthy_default_on("").unwrap_or(false));
        assert_eq!(seconds_or("1.5", 10.0), 1.5);
        assert_eq!(seconds_or("-1", 10.0), 10.0);
        assert_eq!(seconds_or("inf", 10.0), 10.0);
        assert_eq!(seconds_or("abc", 10.0), 10.0);
        assert!(truthy_or_true(" ").unwrap_or(false));
        assert!(!truthy_or_true("0").unwrap_or(true));
        assert_eq!(max_loaded("3").unwrap_or(0), 3);
        assert_eq!(max_loaded("-1").unwrap_or(0), 2);
        assert_eq!(idle_seconds("nan").unwrap_or(1.0), 0.0);
        assert_eq!(idle_seconds("1.5").unwrap_or(0.0), 1.5);
    }
}

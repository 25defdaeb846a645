//! [`CudaEngine`]: a loaded checkpoint on one NVIDIA GPU, implementing
//! [`laya_core::engine::Forward`].
//!
//! One pass stages the rows into pinned memory ([`crate::batch`]), then runs one fixed
//! sequence on the engine's stream: copy in, embedding + norm, 28 encoder layers (4 GEMMs,
//! attention, GeGLU and two norms each), the decision head, the scorer and the act head at
//! the selected positions, copy out. That sequence depends only on the pass's bucket, so it
//! is captured once per bucket as a CUDA graph and replayed: ~250 launches cost one.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use laya_core::checkpoint::CheckpointTensors;
use laya_core::config::CheckpointConfig;
use laya_core::engine::{EngineError, EngineInfo, Forward, Row, RowLogits};

use crate::batch::{self, Bucket};
use crate::compile;
use crate::error::{CudaError, ForwardError, LoadError};
use crate::gemm::{Blas, Choices, Gemm, Kind, Then, HEAD_DIM};
use crate::gpu::{copy_in, copy_out, Args, DeviceBuf, Event, Gpu, Graph, Module, PinnedBuf};
use crate::weights::Weights;
use crate::wgmma::WgKernels;

/// Which attention kernel runs the encoder and the head's full layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Attention {
    /// Tensor-core flash attention, the fastest form the GPU has: `attention_wg` (`wgmma`) on
    /// Hopper, `attention_mma` (`mma.sync`) elsewhere.
    #[default]
    TensorCore,
    /// `attention_mma` on every GPU, Hopper too: the form `attention_wg` is measured against.
    Mma,
    /// One warp per query and head, exact f32 softmax (`attention_rows`): slow, a reference.
    Rows,
}

/// How the engine runs.
#[derive(Debug, Clone)]
pub struct CudaSettings {
    /// CUDA device ordinal.
    pub ordinal: usize,
    /// Replay each bucket's forward as a CUDA graph (off: launch every kernel each time).
    pub graphs: bool,
    pub attention: Attention,
    /// Where compiled kernels are cached; `None` compiles at every start.
    pub kernel_cache: Option<PathBuf>,
    /// Rows are split into passes of at most this many tokens (bounds the activation memory,
    /// which the warm-up allocates whole: ~33 KB a token for `large`).
    pub max_pass_tokens: usize,
    /// Time cuBLASLt's batch-invariant candidates for each layer when it is first planned.
    /// Off by default: timing noise can pick another algorithm on another start, and with it
    /// other last bits in the answers; the first verified candidate is the same on every
    /// start. Timing gained 0-3% when measured per shape (results/GPU-NOTES.md).
    pub tune_gemms: bool,
    /// The pass size (tokens) whose GEMM kernels every pass uses: one algorithm per layer for
    /// every token count keeps each row's answer independent of its batch mates.
    pub gemm_tokens: usize,
    /// Pass sizes (tokens, ascending) whose GEMM kernels passes of at least half as many
    /// tokens use, for each layer where they were seen to give the bits of the `gemm_tokens`
    /// kernels (`gemm.rs`); empty: the `gemm_tokens` kernels for every pass.
    pub gemm_long_tokens: Vec<usize>,
    /// Passes of at most this many tokens take, for each size, the fastest of cuBLASLt's
    /// candidates there that gives every row the bits of the `gemm_tokens` kernels (`gemm.rs`;
    /// the same answers whichever wins); 0: the `gemm_tokens` kernels for every size. Sizes
    /// are timed when first met until [`crate::CudaEngine`]'s warm-up ends (so in a server
    /// only with graphs on, whose warm-up runs the ladder's passes), never while serving, where
    /// a size's first request would wait for the timing; passes that reach a long tier are
    /// timed against its kernels, whose bits they must give. On an H100 it cuts one short
    /// question's pass by 8-15% and four questions' over 256 or 512 tokens by ~11%, and
    /// adds ~10 s to the warm-up (results/GPU.md).
    pub gemm_short_tokens: usize,
    /// On Hopper, the short passes' timed candidates include `gemm_wg`, a GEMM kernel of our
    /// own with blocks small enough to spread a few hundred rows over the whole GPU, taken
    /// like cuBLASLt's candidates only where it gives the same bits (`wgmma.rs`). It gives
    /// cuBLASLt's bits for every layer of the three models' shapes. With it on, GeGLU and
    /// RoPE may run in its epilogue too ([`CudaSettings::gemm_fuse`]). On by default, for the
    /// timed passes (up to [`CudaSettings::gemm_short_tokens`]) of
    /// [`CudaSettings::gemm_own_tokens`] or more.
    pub gemm_own: bool,
    /// With `gemm_own`, only passes of at least this many tokens time our kernels among their
    /// candidates (0: every pass). On an H100 they paid only in the longest passes (4-5 % at
    /// ~2,900 tokens) and cost 2-3 % at ~100 (timing noise picked them there); with 2,048 the
    /// ~2,900-token pass was 1-7 % shorter and the shorter passes kept cuBLASLt's plans
    /// (results/GPU.md).
    pub gemm_own_tokens: usize,
    /// With `gemm_own`, which steps after a GEMM a short pass may run in `gemm_wg`'s
    /// epilogue, and whether only where that was timed faster.
    pub gemm_fuse: Fuse,
}

/// Steps after a GEMM that `gemm_wg` may run in its epilogue ([`CudaSettings::gemm_fuse`]);
/// each is taken for a short pass size only where it gives the bits of the two kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fuse {
    /// The MLP's GeGLU into the `Wi` GEMM.
    pub geglu: bool,
    /// RoPE into the `Wqkv` GEMM (with the tensor-core attention).
    pub rope: bool,
    /// Fused wherever the bits allow, not only where timed faster: for tests that must run
    /// that path.
    pub untimed: bool,
}

impl Default for Fuse {
    fn default() -> Self {
        Fuse {
            geglu: true,
            rope: true,
            untimed: false,
        }
    }
}

impl Default for CudaSettings {
    fn default() -> Self {
        CudaSettings {
            ordinal: 0,
            graphs: true,
            attention: Attention::TensorCore,
            kernel_cache: default_kernel_cache(),
            max_pass_tokens: 16_384,
            tune_gemms: false,
            gemm_tokens: 512,
            gemm_long_tokens: vec![2048],
            gemm_short_tokens: 6144,
            gemm_own: true,
            gemm_own_tokens: 2048,
            gemm_fuse: Fuse::default(),
        }
    }
}

/// `$XDG_CACHE_HOME/sys1rust/kernels`, else `~/.cache/sys1rust/kernels`.
pub fn default_kernel_cache() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|c| c.join("sys1rust").join("kernels"))
}

struct Kernels {
    embed_norm: cudarc::driver::sys::CUfunction,
    norm_f16: cudarc::driver::sys::CUfunction,
    norm_f32: cudarc::driver::sys::CUfunction,
    final_norm: cudarc::driver::sys::CUfunction,
    gather_norm: cudarc::driver::sys::CUfunction,
    geglu: cudarc::driver::sys::CUfunction,
    rope_qk: cudarc::driver::sys::CUfunction,
    attention_mma: cudarc::driver::sys::CUfunction,
    /// Hopper's alone (compiled only with `wgmma`).
    attention_wg: Option<cudarc::driver::sys::CUfunction>,
    attention_rows: cudarc::driver::sys::CUfunction,
    attention_sel: cudarc::driver::sys::CUfunction,
    scorer_hidden: cudarc::driver::sys::CUfunction,
    scorer_out: cudarc::driver::sys::CUfunction,
    act_hidden: cudarc::driver::sys::CUfunction,
    act_out: cudarc::driver::sys::CUfunction,
    spin: cudarc::driver::sys::CUfunction,
    _module: Module,
}

impl Kernels {
    fn load(module: Module, wgmma: bool) -> Result<Kernels, CudaError> {
        Ok(Kernels {
            embed_norm: module.function("embed_norm")?,
            norm_f16: module.function("norm_f16")?,
            norm_f32: module.function("norm_f32")?,
            final_norm: module.function("final_norm")?,
            gather_norm: module.function("gather_norm")?,
            geglu: module.function("geglu")?,
            rope_qk: module.function("rope_qk")?,
            attention_mma: module.function_max_shared("attention_mma")?,
            attention_wg: if wgmma {
                Some(module.function_max_shared("attention_wg")?)
            } else {
                None
            },
            attention_rows: module.function("attention_rows")?,
            attention_sel: module.function("attention_sel")?,
            scorer_hidden: module.function("scorer_hidden")?,
            scorer_out: module.function("scorer_out")?,
            act_hidden: module.function("act_hidden")?,
            act_out: module.function("act_out")?,
            spin: module.function("spin")?,
            _module: module,
        })
    }

    /// The kernel `choice` runs on this GPU: `attention_wg` where it exists (Hopper),
    /// `attention_mma` otherwise or when asked for.
    fn attention(&self, choice: Attention) -> AttentionKernel {
        match (choice, self.attention_wg) {
            (Attention::TensorCore, Some(wg)) => AttentionKernel::Wg(wg),
            (Attention::TensorCore | Attention::Mma, _) => AttentionKernel::Mma(self.attention_mma),
            (Attention::Rows, _) => AttentionKernel::Rows,
        }
    }
}

/// Activation buffers for every bucket up to `cap`, and the staging memory.
struct Workspace {
    cap: Bucket,
    stage: PinnedBuf,
    out_host: PinnedBuf,
    meta: DeviceBuf,
    x: DeviceBuf,
    a: DeviceBuf,
    qkv: DeviceBuf,
    att: DeviceBuf,
    wide: DeviceBuf,
    g: DeviceBuf,
    h: DeviceBuf,
    hs: DeviceBuf,
    a_s: DeviceBuf,
    q_s: DeviceBuf,
    att_s: DeviceBuf,
    wide_s: DeviceBuf,
    z: DeviceBuf,
    u: DeviceBuf,
    act_hid: DeviceBuf,
    out: DeviceBuf,
}

impl Workspace {
    fn new(
        cap: Bucket,
        d: usize,
        inter: usize,
        n_act: usize,
        act_hidden: usize,
    ) -> Result<Workspace, CudaError> {
        let (t, s) = (cap.tokens, cap.selected);
        let wide = (2 * inter).max(4 * d);
        Ok(Workspace {
            cap,
            stage: PinnedBuf::alloc(cap.words() * 4)?,
            out_host: PinnedBuf::alloc(cap.outputs(n_act) * 4)?,
            meta: DeviceBuf::alloc(cap.words() * 4)?,
            x: DeviceBuf::alloc(t * d * 4)?,
            a: DeviceBuf::alloc(t * d * 2)?,
            qkv: DeviceBuf::alloc(t * 3 * d * 2)?,
            att: DeviceBuf::alloc(t * d * 2)?,
            wide: DeviceBuf::alloc(t * wide * 2)?,
            g: DeviceBuf::alloc(t * inter * 2)?,
            h: DeviceBuf::alloc(t * d * 4)?,
            hs: DeviceBuf::alloc(s * d * 4)?,
            a_s: DeviceBuf::alloc(s * d * 2)?,
            q_s: DeviceBuf::alloc(s * d * 2)?,
            att_s: DeviceBuf::alloc(s * d * 2)?,
            wide_s: DeviceBuf::alloc(s * 4 * d * 2)?,
            z: DeviceBuf::alloc(s * d * 4)?,
            u: DeviceBuf::alloc(s * d * 4)?,
            act_hid: DeviceBuf::alloc(cap.max_rows() * act_hidden * 4)?,
            out: DeviceBuf::alloc(cap.outputs(n_act) * 4)?,
        })
    }
}

/// Counters since load, for logs and benchmarks.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    /// Passes replayed from a captured graph.
    pub replays: u64,
    /// Passes launched kernel by kernel (first use of a bucket, or graphs off).
    pub eager: u64,
    /// Graphs captured.
    pub captures: u64,
}

/// A Laya checkpoint loaded on one NVIDIA GPU.
///
/// Build it on the thread that will use it: the CUDA context is bound to that thread.
pub struct CudaEngine {
    config: CheckpointConfig,
    settings: CudaSettings,
    blas: Blas,
    weights: Weights,
    kernels: Kernels,
    work: Option<Workspace>,
    graphs: HashMap<Bucket, Graph>,
    /// Buckets whose capture failed: they run kernel by kernel from then on.
    no_graph: HashSet<Bucket>,
    stats: Stats,
    gpu: Gpu,
}

impl Drop for CudaEngine {
    fn drop(&mut self) {
        // Nothing may still run when the buffers, graphs and module go; the fields then drop
        // with this GPU's context current.
        let _ = self.gpu.bind();
        let _ = self.gpu.sync();
        self.graphs.clear();
    }
}

impl std::fmt::Debug for CudaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEngine")
            .field("gpu", &self.gpu)
            .field("graphs", &self.graphs.len())
            .finish_non_exhaustive()
    }
}

const HEAD_NORM_EPS: f32 = 1e-5;
/// Selected rows per block of `scorer_hidden`.
const SCORER_ROWS: usize = 32;
const NORM_ROWS_PER_BLOCK: usize = 8;

/// The shared memory `attention_wg` asks for: its five 8 KB tiles (the query tile, two
/// stages of keys and values) and 1 KB to align them on the swizzle's period.
const ATTENTION_WG_SHARED: u32 = 5 * 8192 + 1024;

/// The kernel that runs the encoder's attention ([`Kernels::attention`]).
#[derive(Debug, Clone, Copy)]
enum AttentionKernel {
    Wg(cudarc::driver::sys::CUfunction),
    Mma(cudarc::driver::sys::CUfunction),
    Rows,
}

impl AttentionKernel {
    fn name(self) -> &'static str {
        match self {
            AttentionKernel::Wg(_) => "attention_wg",
            AttentionKernel::Mma(_) => "attention_mma",
            AttentionKernel::Rows => "attention_rows",
        }
    }
}

fn grid_for(n: usize, per_block: usize) -> (u32, u32, u32) {
    (n.div_ceil(per_block).max(1) as u32, 1, 1)
}

impl CudaEngine {
    /// Loads the checkpoint directory `dir` onto the GPU, compiles (or loads cached) kernels.
    pub fn load(dir: &Path, settings: &CudaSettings) -> Result<CudaEngine, LoadError> {
        let started = Instant::now();
        let config = CheckpointConfig::load(dir)?;
        check_supported(&config)?;
        let tensors = CheckpointTensors::open(dir, &config)?;
        let gpu = Gpu::open(settings.ordinal)?;
        let hidden = config.encoder.hidden_size;
        let mut compiled = compile::compile(gpu.cc, hidden, settings.kernel_cache.as_deref())?;
        let module = match Module::load(&compiled.image) {
            Ok(m) => m,
            // A cached cubin the driver refuses (another driver, say) is compiled afresh.
            Err(e) if compiled.cached => {
                tracing::warn!(error = %e, "cached kernels refused: recompiling");
                if let Some(p) = &compiled.path {
                    let _ = std::fs::remove_file(p);
                }
                compiled = compile::compile(gpu.cc, hidden, settings.kernel_cache.as_deref())?;
                Module::load(&compiled.image)?
            }
            Err(e) => return Err(e.into()),
        };
        let own = if settings.gemm_own && compile::has_wgmma(gpu.cc) {
            Some(WgKernels::load(&module)?)
        } else {
            None
        };
        let kernels = Kernels::load(module, compile::has_wgmma(gpu.cc))?;
        let weights = Weights::load(&tensors, &config)?;
        // The uploads are synchronous copies from pageable memory on the legacy stream, which
        // the engine's stream does not wait for.
        gpu.sync_all()?;
        let mut blas = Blas::new()?;
        blas.tune = settings.tune_gemms;
        blas.reference_tokens = settings.gemm_tokens.max(1);
        blas.long_tokens = settings.gemm_long_tokens.clone();
        blas.short_tokens = settings.gemm_short_tokens;
        blas.own = own;
        blas.own_tokens = settings.gemm_own_tokens;
        blas.fuse_untimed = settings.gemm_fuse.untimed;
        tracing::info!(
            dir = %dir.display(),
            gpu = %gpu.name,
            cc = %format!("{}.{}", gpu.cc.0, gpu.cc.1),
            weights_mib = weights.bytes >> 20,
            kernels_cached = compiled.cached,
            attention = kernels.attention(settings.attention).name(),
            ms = started.elapsed().as_millis() as u64,
            "checkpoint loaded on CUDA"
        );
        Ok(CudaEngine {
            config,
            settings: settings.clone(),
            blas,
            weights,
            kernels,
            work: None,
            graphs: HashMap::new(),
            no_graph: HashSet::new(),
            stats: Stats::default(),
            gpu,
        })
    }

    /// The checkpoint's configs.
    pub fn config(&self) -> &CheckpointConfig {
        &self.config
    }

    /// Counters since load.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// What the GEMMs chose so far: layer shapes, long-pass algorithms, and the short pass
    /// sizes that took a faster algorithm of the same bits, `gemm_wg`, or `gemm_wg` with
    /// the next step fused (`gemm.rs`).
    pub fn gemm_algorithms(&self) -> Choices {
        self.blas.choices()
    }

    /// Whether the encoder's attention runs `attention_wg` (Hopper, default settings).
    pub fn has_wgmma_attention(&self) -> bool {
        matches!(
            self.kernels.attention(self.settings.attention),
            AttentionKernel::Wg(_)
        )
    }

    /// Whether `gemm_wg` is loaded ([`CudaSettings::gemm_own`] on a Hopper GPU).
    pub fn has_own_gemm(&self) -> bool {
        self.blas.own.is_some()
    }

    fn check_rows(&self, rows: &[Row]) -> Result<(), ForwardError> {
        let max = self
            .weights
            .max_positions
            .min(self.settings.max_pass_tokens);
        laya_core::engine::check_rows(rows, self.config.encoder.vocab_size, max)
            .map_err(|(row, reason)| ForwardError::InvalidRow { row, reason })
    }

    /// Runs `rows` (each exactly its own tokens and markers) and returns their logits.
    pub fn run(&mut self, rows: &[Row]) -> Result<Vec<RowLogits>, ForwardError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        self.check_rows(rows)?;
        self.gpu.bind()?;
        let started = Instant::now();
        let mut out = Vec::with_capacity(rows.len());
        for range in batch::passes(rows, self.settings.max_pass_tokens) {
            match self.run_pass(&rows[range]) {
                Ok(logits) => out.extend(logits),
                Err(e) => {
                    // Whatever was queued finishes before the staging memory is rewritten.
                    let _ = self.gpu.sync();
                    return Err(e);
                }
            }
        }
        tracing::debug!(
            rows = rows.len(),
            tokens = rows.iter().map(|r| r.ids.len()).sum::<usize>(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "forward"
        );
        Ok(out)
    }

    /// Prepares `bucket` ahead of traffic: buffers, GEMM plans and its graph.
    pub fn prepare(&mut self, bucket: Bucket) -> Result<(), ForwardError> {
        if Bucket::for_sizes(bucket.tokens, bucket.selected) != bucket {
            return Err(
                CudaError::Unavailable(format!("{bucket:?} is not a bucket passes use")).into(),
            );
        }
        self.gpu.bind()?;
        let warmed = self.warm_bucket(bucket);
        if warmed.is_err() {
            // Whatever was queued finishes before the buffers are touched again.
            let _ = self.gpu.sync();
        }
        warmed
    }

    fn warm_bucket(&mut self, bucket: Bucket) -> Result<(), ForwardError> {
        self.ensure_capacity(bucket)?;
        if self.settings.graphs && !self.graphs.contains_key(&bucket) {
            // Rows of padding only: nrows = 0, every kernel still runs at full size.
            let work = self.work.as_mut().ok_or_else(no_workspace)?;
            batch::stage(&[], bucket, work.stage.words_mut());
            self.enqueue(bucket, None)?;
            self.gpu.sync()?;
            self.try_capture(bucket);
        }
        Ok(())
    }

    fn ensure_capacity(&mut self, bucket: Bucket) -> Result<(), CudaError> {
        let fits = self
            .work
            .as_ref()
            .is_some_and(|w| w.cap.tokens >= bucket.tokens && w.cap.selected >= bucket.selected);
        if fits {
            return Ok(());
        }
        let old = self.work.as_ref().map(|w| w.cap);
        // Read positions at least double when they grow, so a load that keeps reading more
        // of them drops the graphs a few times, not at every new size.
        let selected = match old {
            Some(c) if bucket.selected > c.selected => bucket.selected.max(2 * c.selected),
            _ => bucket.selected,
        };
        let cap = Bucket {
            tokens: bucket.tokens.max(old.map_or(0, |c| c.tokens)),
            selected: selected.max(old.map_or(0, |c| c.selected)),
        };
        // Graphs hold the old buffers' addresses: they go first.
        self.graphs.clear();
        self.no_graph.clear();
        self.work = None;
        let e = &self.config.encoder;
        self.work = Some(Workspace::new(
            cap,
            e.hidden_size,
            e.intermediate_size,
            self.config.agent.n_act,
            self.weights.act_hidden,
        )?);
        tracing::debug!(
            tokens = cap.tokens,
            selected = cap.selected,
            "CUDA workspace sized"
        );
        Ok(())
    }

    fn run_pass(&mut self, rows: &[Row]) -> Result<Vec<RowLogits>, ForwardError> {
        let (tokens, selected) = batch::sizes(rows);
        let bucket = Bucket::for_sizes(tokens, selected);
        self.ensure_capacity(bucket)?;
        let work = self.work.as_mut().ok_or_else(no_workspace)?;
        batch::stage(rows, bucket, work.stage.words_mut());
        if let Some(graph) = self.graphs.get(&bucket) {
            graph.launch(self.gpu.stream())?;
            self.stats.replays += 1;
            self.gpu.sync()?;
        } else {
            self.enqueue(bucket, None)?;
            self.stats.eager += 1;
            self.gpu.sync()?;
            if self.settings.graphs && !self.no_graph.contains(&bucket) {
                // This pass ran eagerly (its answers are read below); the next one of this
                // bucket replays.
                self.try_capture(bucket);
            }
        }
        let work = self.work.as_ref().ok_or_else(no_workspace)?;
        let out = work.out_host.floats();
        let n_act = self.config.agent.n_act;
        let mut result = Vec::with_capacity(rows.len());
        let mut at = 0;
        for (r, row) in rows.iter().enumerate() {
            let k = row.markers.len();
            let acts = bucket.selected + r * n_act;
            result.push(RowLogits {
                logits: out[at + 1..at + 1 + k].to_vec(),
                act_logits: out[acts..acts + n_act].to_vec(),
            });
            at += 1 + k;
        }
        Ok(result)
    }

    /// GPU time of each step of a pass over `rows`, with an event after every step. The
    /// steps are queued behind a kernel that holds the stream for 20 ms, so they run back to
    /// back as in a graph replay (events inside graphs cannot be timed). Returns `(label,
    /// microseconds)` summed over the steps of each label (medians over `iters` passes), in
    /// first-seen order, and the whole pass (median).
    pub fn profile(
        &mut self,
        rows: &[Row],
        iters: usize,
    ) -> Result<(Vec<(String, f64)>, f64), ForwardError> {
        self.check_rows(rows)?;
        self.gpu.bind()?;
        let (tokens, selected) = batch::sizes(rows);
        let bucket = Bucket::for_sizes(tokens, selected);
        // Buffers and GEMM plans exactly as a normal pass makes them.
        self.run_pass(rows)?;
        let stream = self.gpu.stream();
        let mut per_step: Vec<Vec<f64>> = Vec::new();
        let mut labels: Vec<&'static str> = Vec::new();
        let mut totals = Vec::with_capacity(iters);
        for _ in 0..iters.max(1) {
            let work = self.work.as_mut().ok_or_else(no_workspace)?;
            batch::stage(rows, bucket, work.stage.words_mut());
            Args::new()
                .i64(20_000_000)
                .launch(self.kernels.spin, (1, 1, 1), 1, 0, stream)?;
            let start = Event::new()?;
            start.record(stream)?;
            let mut marks = Vec::new();
            self.enqueue(bucket, Some(&mut marks))?;
            self.gpu.sync()?;
            if per_step.is_empty() {
                per_step = vec![Vec::with_capacity(iters); marks.len()];
                labels = marks.iter().map(|(l, _)| *l).collect();
            }
            let mut prev = &start;
            for (i, (_, ev)) in marks.iter().enumerate() {
                per_step[i].push(f64::from(prev.elapsed_ms(ev)?) * 1e3);
                prev = ev;
            }
            totals.push(f64::from(start.elapsed_ms(prev)?) * 1e3);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let mut by_label: Vec<(String, f64)> = Vec::new();
        for (label, times) in labels.iter().zip(per_step.iter_mut()) {
            let t = median(times);
            match by_label.iter_mut().find(|(l, _)| l == label) {
                Some((_, sum)) => *sum += t,
                None => by_label.push(((*label).to_owned(), t)),
            }
        }
        Ok((by_label, median(&mut totals)))
    }

    /// Captures `bucket`'s graph; a failure (out of memory, say) is logged and the bucket
    /// runs kernel by kernel from then on, with the same answers.
    fn try_capture(&mut self, bucket: Bucket) {
        if let Err(e) = self.capture(bucket) {
            tracing::warn!(tokens = bucket.tokens, selected = bucket.selected, error = %e,
                "CUDA graph capture failed; this bucket runs without a graph");
            self.no_graph.insert(bucket);
        }
    }

    fn capture(&mut self, bucket: Bucket) -> Result<(), CudaError> {
        let stream = self.gpu.stream();
        let started = Instant::now();
        Graph::begin(stream)?;
        self.blas.capturing = true;
        let queued = self.enqueue(bucket, None);
        self.blas.capturing = false;
        if let Err(e) = queued {
            Graph::abandon(stream);
            return Err(e);
        }
        let graph = Graph::end(stream)?;
        self.stats.captures += 1;
        tracing::debug!(
            tokens = bucket.tokens,
            selected = bucket.selected,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "CUDA graph captured"
        );
        self.graphs.insert(bucket, graph);
        Ok(())
    }

    /// Queues the whole pass for `bucket` on the stream: the sequence a graph captures. With
    /// `marks`, an event is recorded after each step, labelled (for [`CudaEngine::profile`]).
    fn enqueue(
        &mut self,
        b: Bucket,
        mut marks: Option<&mut Vec<(&'static str, Event)>>,
    ) -> Result<(), CudaError> {
        let work = self.work.as_ref().ok_or_else(no_workspace)?;
        let w = &self.weights;
        let k = &self.kernels;
        let e = &self.config.encoder;
        let stream = self.gpu.stream();
        let (t, s) = (b.tokens, b.selected);
        let d = e.hidden_size;
        let inter = e.intermediate_size;
        let heads = e.num_attention_heads;
        let hd = e.head_dim();
        let scale = 1.0 / (hd as f32).sqrt();
        let eps = e.norm_eps;
        let o = b.offsets();
        let meta = |off: usize| work.meta.at(off * 4);
        let (ti, di) = (t as i32, d as i32);
        let norm_grid = grid_for(t, NORM_ROWS_PER_BLOCK);
        let norm_block = (NORM_ROWS_PER_BLOCK * 32) as u32;
        // y = f16(LayerNorm(x) · w (+ b)) over `rows` rows.
        let norm16 = |x: u64, w: u64, b: u64, y: u64, rows: usize, eps: f32| {
            Args::new()
                .ptr(x)
                .ptr(w)
                .ptr(b)
                .ptr(y)
                .i32(rows as i32)
                .i32(di)
                .f32(eps)
                .launch(
                    k.norm_f16,
                    grid_for(rows, NORM_ROWS_PER_BLOCK),
                    norm_block,
                    0,
                    stream,
                )
        };
        let blas = &mut self.blas;
        // y (op)= x · wᵀ (+ bias) over `tokens` rows: see gemm::Gemm.
        // With `then`, the step after the GEMM, which may run in the same kernel: true if it
        // did, false if it is still to be queued.
        let mut gemm = |g: Gemm, then: Option<&Then>| match then {
            Some(then) => blas.run_then(&g, then, stream),
            None => blas.run(&g, stream).map(|()| false),
        };
        let mut mark = |label: &'static str| -> Result<(), CudaError> {
            if let Some(m) = marks.as_deref_mut() {
                let ev = Event::new()?;
                ev.record(stream)?;
                m.push((label, ev));
            }
            Ok(())
        };

        copy_in(work.meta.ptr(), &work.stage, b.words() * 4, stream)?;
        mark("copy in")?;
        Args::new()
            .ptr(meta(o.ids))
            .ptr(w.emb.ptr())
            .ptr(w.emb_norm.ptr())
            .ptr(work.x.ptr())
            .ptr(work.a.ptr())
            .i32(ti)
            .i32(di)
            .f32(eps)
            .launch(k.embed_norm, norm_grid, norm_block, 0, stream)?;
        mark("embed + norm")?;

        // RoPE on q and k of the fused Wqkv output, in place, before the tensor-core attention
        // (the rows kernel turns them itself): in the GEMM's epilogue where `gemm_wg` runs it
        // so (`gemm.rs`), else as a pass of its own. Inside the tensor-core kernel, on each
        // tile as it lands, it took longer than this pass (results/GPU.md, 2026-12-05).
        let rope_then = |rope: &crate::weights::Rope| Then::Rope {
            pos: meta(o.pos),
            cos: rope.cos.ptr(),
            sin: rope.sin.ptr(),
            positions: rope.cos.bytes() / (HEAD_DIM / 2 * 4),
            kernel: k.rope_qk,
        };
        // `rope`: the tables of the layer, which only the rows kernel reads.
        let attention =
            |q: u64, ld: usize, out: u64, rope: Option<&crate::weights::Rope>, window: i32| {
                let tensor_core = |f, shared| {
                    Args::new()
                        .ptr(q)
                        .ptr(q + (d * 2) as u64)
                        .ptr(q + (2 * d * 2) as u64)
                        .i32(ld as i32)
                        .ptr(out)
                        .i32(di)
                        .ptr(meta(o.tiles))
                        .ptr(meta(o.key_start))
                        .ptr(meta(o.key_end))
                        .i32(window)
                        .f32(scale)
                        .launch(
                            f,
                            (b.max_tiles() as u32, heads as u32, 1),
                            128,
                            shared,
                            stream,
                        )
                };
                match k.attention(self.settings.attention) {
                    AttentionKernel::Wg(f) => tensor_core(f, ATTENTION_WG_SHARED),
                    AttentionKernel::Mma(f) => tensor_core(f, 0),
                    AttentionKernel::Rows => {
                        let (rc, rs) = rope.map_or((0, 0), |r| (r.cos.ptr(), r.sin.ptr()));
                        Args::new()
                            .ptr(q)
                            .i32(ld as i32)
                            .ptr(0)
                            .ptr(q + (d * 2) as u64)
                            .ptr(q + (2 * d * 2) as u64)
                            .i32(ld as i32)
                            .ptr(out)
                            .i32(di)
                            .ptr(meta(o.key_start))
                            .ptr(meta(o.key_end))
                            .ptr(meta(o.pos))
                            .ptr(rc)
                            .ptr(rs)
                            .i32(window)
                            .i32(ti)
                            .i32(heads as i32)
                            .f32(scale)
                            .launch(k.attention_rows, ((t * heads) as u32, 1, 1), 128, 0, stream)
                    }
                }
            };

        let half_window = e.half_window() as i32;
        let fuse = self.settings.gemm_fuse;
        let geglu = Then::GeGlu {
            g: work.g.ptr(),
            kernel: k.geglu,
        };
        for layer in &w.layers {
            if let Some(norm) = &layer.attn_norm {
                norm16(work.x.ptr(), norm.ptr(), 0, work.a.ptr(), t, eps)?;
                mark("norm")?;
            }
            let (rope, window) = if layer.sliding {
                (&w.rope_local, half_window)
            } else {
                (&w.rope_global, -1)
            };
            let qkv = Gemm {
                kind: Kind::Half,
                tokens: t,
                out: 3 * d,
                inp: d,
                x: work.a.ptr(),
                w: layer.wqkv.ptr(),
                bias: 0,
                y: work.qkv.ptr(),
            };
            let turn = (self.settings.attention != Attention::Rows).then(|| rope_then(rope));
            let fused_turn = turn.as_ref().filter(|_| fuse.rope);
            if gemm(qkv, fused_turn)? {
                mark("gemm qkv + rope")?;
            } else {
                mark("gemm qkv")?;
                if let Some(turn) = &turn {
                    turn.launch(&qkv, stream)?;
                    mark("rope")?;
                }
            }
            attention(work.qkv.ptr(), 3 * d, work.att.ptr(), Some(rope), window)?;
            mark(if layer.sliding {
                "attention sliding"
            } else {
                "attention global"
            })?;
            gemm(
                Gemm {
                    kind: Kind::Residual,
                    tokens: t,
                    out: d,
                    inp: d,
                    x: work.att.ptr(),
                    w: layer.wo.ptr(),
                    bias: 0,
                    y: work.x.ptr(),
                },
                None,
            )?;
            mark("gemm o + residual")?;
            norm16(work.x.ptr(), layer.mlp_norm.ptr(), 0, work.a.ptr(), t, eps)?;
            mark("norm")?;
            let wi = Gemm {
                kind: Kind::Half,
                tokens: t,
                out: 2 * inter,
                inp: d,
                x: work.a.ptr(),
                w: layer.wi.ptr(),
                bias: 0,
                y: work.wide.ptr(),
            };
            if gemm(wi, fuse.geglu.then_some(&geglu))? {
                mark("gemm wi + geglu")?;
            } else {
                mark("gemm wi")?;
                geglu.launch(&wi, stream)?;
                mark("geglu")?;
            }
            gemm(
                Gemm {
                    kind: Kind::Residual,
                    tokens: t,
                    out: d,
                    inp: inter,
                    x: work.g.ptr(),
                    w: layer.wo_mlp.ptr(),
                    bias: 0,
                    y: work.x.ptr(),
                },
                None,
            )?;
            mark("gemm wo + residual")?;
        }

        // Final norm, type embedding, and the first head layer's norm1.
        let first = w
            .head
            .first()
            .ok_or_else(|| CudaError::Unavailable("no decision-head layer".into()))?;
        Args::new()
            .ptr(work.x.ptr())
            .ptr(w.final_norm.ptr())
            .ptr(w.type_emb.ptr())
            .ptr(meta(o.qtype))
            .ptr(work.h.ptr())
            .ptr(first.norm1_w.ptr())
            .ptr(first.norm1_b.ptr())
            .ptr(work.a.ptr())
            .i32(ti)
            .i32(di)
            .f32(eps)
            .f32(HEAD_NORM_EPS)
            .launch(k.final_norm, norm_grid, norm_block, 0, stream)?;
        mark("final norm + type + norm1")?;

        let n_head = w.head.len();
        for (j, hl) in w.head.iter().enumerate() {
            if j + 1 < n_head {
                gemm(
                    Gemm {
                        kind: Kind::HalfBias,
                        tokens: t,
                        out: 3 * d,
                        inp: d,
                        x: work.a.ptr(),
                        w: hl.in_w.ptr(),
                        bias: hl.in_b.ptr(),
                        y: work.qkv.ptr(),
                    },
                    None,
                )?;
                mark("head gemm qkv")?;
                attention(work.qkv.ptr(), 3 * d, work.att.ptr(), None, -1)?;
                mark("head attention")?;
                gemm(
                    Gemm {
                        kind: Kind::ResidualBias,
                        tokens: t,
                        out: d,
                        inp: d,
                        x: work.att.ptr(),
                        w: hl.out_w.ptr(),
                        bias: hl.out_b.ptr(),
                        y: work.h.ptr(),
                    },
                    None,
                )?;
                mark("head gemm o + residual")?;
                norm16(
                    work.h.ptr(),
                    hl.norm2_w.ptr(),
                    hl.norm2_b.ptr(),
                    work.a.ptr(),
                    t,
                    HEAD_NORM_EPS,
                )?;
                mark("head norm")?;
                gemm(
                    Gemm {
                        kind: Kind::HalfReluBias,
                        tokens: t,
                        out: 4 * d,
                        inp: d,
                        x: work.a.ptr(),
                        w: hl.l1_w.ptr(),
                        bias: hl.l1_b.ptr(),
                        y: work.wide.ptr(),
                    },
                    None,
                )?;
                mark("head gemm linear1")?;
                gemm(
                    Gemm {
                        kind: Kind::ResidualBias,
                        tokens: t,
                        out: d,
                        inp: 4 * d,
                        x: work.wide.ptr(),
                        w: hl.l2_w.ptr(),
                        bias: hl.l2_b.ptr(),
                        y: work.h.ptr(),
                    },
                    None,
                )?;
                mark("head gemm linear2")?;
                let next = &w.head[j + 1];
                norm16(
                    work.h.ptr(),
                    next.norm1_w.ptr(),
                    next.norm1_b.ptr(),
                    work.a.ptr(),
                    t,
                    HEAD_NORM_EPS,
                )?;
                mark("head norm")?;
                continue;
            }
            // The last layer: keys and values for every token, the rest only at the selected
            // positions (nothing else is read).
            let si = s as i32;
            let sel_grid = grid_for(s, NORM_ROWS_PER_BLOCK);
            gemm(
                Gemm {
                    kind: Kind::HalfBias,
                    tokens: t,
                    out: 2 * d,
                    inp: d,
                    x: work.a.ptr(),
                    w: hl.in_w.at(d * d * 2),
                    bias: hl.in_b.at(d * 2),
                    y: work.qkv.ptr(),
                },
                None,
            )?;
            mark("head gemm kv")?;
            Args::new()
                .ptr(work.h.ptr())
                .ptr(meta(o.sel))
                .ptr(work.hs.ptr())
                .ptr(hl.norm1_w.ptr())
                .ptr(hl.norm1_b.ptr())
                .ptr(work.a_s.ptr())
                .i32(si)
                .i32(di)
                .f32(HEAD_NORM_EPS)
                .launch(k.gather_norm, sel_grid, norm_block, 0, stream)?;
            mark("head gather + norm1")?;
            gemm(
                Gemm {
                    kind: Kind::HalfBias,
                    tokens: s,
                    out: d,
                    inp: d,
                    x: work.a_s.ptr(),
                    w: hl.in_w.ptr(),
                    bias: hl.in_b.ptr(),
                    y: work.q_s.ptr(),
                },
                None,
            )?;
            mark("head gemm q (selected)")?;
            let selected = Args::new()
                .ptr(work.q_s.ptr())
                .i32(di)
                .ptr(meta(o.sel))
                .ptr(work.qkv.ptr())
                .ptr(work.qkv.at(d * 2))
                .i32(2 * di)
                .ptr(work.att_s.ptr())
                .i32(di)
                .ptr(meta(o.key_start))
                .ptr(meta(o.key_end));
            let grid = ((s * heads) as u32, 1, 1);
            match self.settings.attention {
                Attention::TensorCore | Attention::Mma => selected
                    .ptr(meta(o.row_sel))
                    .ptr(meta(o.row_nmark))
                    .ptr(meta(o.nrows))
                    .i32(si)
                    .i32(heads as i32)
                    .f32(scale)
                    .launch(k.attention_sel, grid, 128, 0, stream)?,
                // The reference path keeps its own kernel here too, so the tests that compare
                // the two paths check attention_sel against an independent one.
                Attention::Rows => selected
                    .ptr(meta(o.pos))
                    .ptr(0)
                    .ptr(0)
                    .i32(-1)
                    .i32(si)
                    .i32(heads as i32)
                    .f32(scale)
                    .launch(k.attention_rows, grid, 128, 0, stream)?,
            }
            mark("head attention (selected)")?;
            gemm(
                Gemm {
                    kind: Kind::ResidualBias,
                    tokens: s,
                    out: d,
                    inp: d,
                    x: work.att_s.ptr(),
                    w: hl.out_w.ptr(),
                    bias: hl.out_b.ptr(),
                    y: work.hs.ptr(),
                },
                None,
            )?;
            mark("head gemm o (selected)")?;
            norm16(
                work.hs.ptr(),
                hl.norm2_w.ptr(),
                hl.norm2_b.ptr(),
                work.a_s.ptr(),
                s,
                HEAD_NORM_EPS,
            )?;
            mark("head norm2 (selected)")?;
            gemm(
                Gemm {
                    kind: Kind::HalfReluBias,
                    tokens: s,
                    out: 4 * d,
                    inp: d,
                    x: work.a_s.ptr(),
                    w: hl.l1_w.ptr(),
                    bias: hl.l1_b.ptr(),
                    y: work.wide_s.ptr(),
                },
                None,
            )?;
            mark("head gemm linear1 (selected)")?;
            gemm(
                Gemm {
                    kind: Kind::ResidualBias,
                    tokens: s,
                    out: d,
                    inp: 4 * d,
                    x: work.wide_s.ptr(),
                    w: hl.l2_w.ptr(),
                    bias: hl.l2_b.ptr(),
                    y: work.hs.ptr(),
                },
                None,
            )?;
            mark("head gemm linear2 (selected)")?;

            // Scorer (f32) at every selected position, then the act head per row.
            Args::new()
                .ptr(work.hs.ptr())
                .ptr(w.scorer_norm_w.ptr())
                .ptr(w.scorer_norm_b.ptr())
                .ptr(work.z.ptr())
                .i32(si)
                .i32(di)
                .f32(HEAD_NORM_EPS)
                .launch(k.norm_f32, sel_grid, norm_block, 0, stream)?;
            mark("scorer norm")?;
            Args::new()
                .ptr(work.z.ptr())
                .ptr(w.scorer_w1.ptr())
                .ptr(w.scorer_b1.ptr())
                .ptr(work.u.ptr())
                .i32(si)
                .i32(di)
                .i32(SCORER_ROWS as i32)
                .launch(
                    k.scorer_hidden,
                    (d.div_ceil(8) as u32, s.div_ceil(SCORER_ROWS) as u32, 1),
                    256,
                    0,
                    stream,
                )?;
            mark("scorer linear")?;
            Args::new()
                .ptr(work.u.ptr())
                .ptr(w.scorer_w3.ptr())
                .ptr(w.scorer_b3.ptr())
                .ptr(work.out.ptr())
                .i32(si)
                .i32(di)
                .launch(k.scorer_out, sel_grid, norm_block, 0, stream)?;
            mark("scorer out")?;
            let n_act = self.config.agent.n_act;
            Args::new()
                .ptr(work.out.ptr())
                .ptr(work.hs.ptr())
                .ptr(meta(o.row_sel))
                .ptr(meta(o.row_nmark))
                .ptr(meta(o.nrows))
                .ptr(w.act_w0.ptr())
                .ptr(w.act_b0.ptr())
                .ptr(work.act_hid.ptr())
                .i32(di)
                .i32(w.act_hidden as i32)
                .launch(
                    k.act_hidden,
                    (b.max_rows() as u32, w.act_hidden.div_ceil(8) as u32, 1),
                    256,
                    0,
                    stream,
                )?;
            Args::new()
                .ptr(work.act_hid.ptr())
                .ptr(meta(o.nrows))
                .ptr(w.act_w2.ptr())
                .ptr(w.act_b2.ptr())
                .ptr(work.out.at(s * 4))
                .i32(w.act_hidden as i32)
                .i32(n_act as i32)
                .launch(k.act_out, grid_for(b.max_rows() * n_act, 8), 256, 0, stream)?;
            mark("act head")?;
        }
        copy_out(
            &work.out_host,
            work.out.ptr(),
            b.outputs(self.config.agent.n_act) * 4,
            stream,
        )?;
        mark("copy out")?;
        Ok(())
    }
}

/// The buckets `sys1rust serve` captures before its ready line: every bucket of up to 1,024
/// tokens (one to several questions on short states, alone or batched) with room for up to
/// 256 read positions, as many as its tokens can need, and the token buckets up to 6,144 (ten
/// questions on 512-token states) with room for 32 and 64. Other buckets are captured on
/// first use.
pub fn warm_ladder() -> Vec<Bucket> {
    let mut out = Vec::new();
    for selected in [16, 32, 64, 128, 256] {
        let tokens = (1..=16)
            .map(|i| 64 * i)
            .filter(|&t: &usize| selected <= t.next_power_of_two());
        out.extend(tokens.map(|tokens| Bucket { tokens, selected }));
        if matches!(selected, 32 | 64) {
            let tokens = (5..=24).map(|i| 256 * i);
            out.extend(tokens.map(|tokens| Bucket { tokens, selected }));
        }
    }
    out
}

fn no_workspace() -> CudaError {
    CudaError::Unavailable("the CUDA workspace is not allocated".into())
}

/// The shapes these kernels implement: 64-wide heads, hidden sizes in 8-wide vectors up to
/// 2,048, an intermediate size in 8-wide vectors, an act head of at most 1,024 units.
fn check_supported(cfg: &CheckpointConfig) -> Result<(), LoadError> {
    let e = &cfg.encoder;
    let bad = |why: String| Err(LoadError::Unsupported(why));
    if e.head_dim() != 64 || e.hidden_size.checked_rem(e.num_attention_heads) != Some(0) {
        return bad(format!(
            "attention heads of {} dims (64 needed)",
            e.head_dim()
        ));
    }
    if e.hidden_size.checked_rem(8) != Some(0) || e.hidden_size > 2048 {
        return bad(format!(
            "hidden size {} (a multiple of 8, at most 2048)",
            e.hidden_size
        ));
    }
    if e.intermediate_size.checked_rem(8) != Some(0) {
        return bad(format!(
            "intermediate size {} (a multiple of 8)",
            e.intermediate_size
        ));
    }
    if laya_core::checkpoint::head_heads(e.hidden_size) * 64 != e.hidden_size {
        return bad("decision-head heads are not 64 wide".into());
    }
    if cfg.agent.head_layers == 0 {
        return bad("a decision head with no layers".into());
    }
    if e.layer_kinds.len() != e.num_hidden_layers {
        return bad("one layer kind per encoder layer is needed".into());
    }
    Ok(())
}

impl Forward for CudaEngine {
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<RowLogits>, EngineError> {
        self.run(rows).map_err(|e| EngineError::backend("cuda", e))
    }

    fn info(&self) -> EngineInfo {
        EngineInfo {
            engine: "cuda",
            device: "cuda".to_owned(),
            precision: "f16",
        }
    }

    /// Captures the graphs of [`warm_ladder`], so the first requests replay them.
    fn warm(&mut self) -> Result<(), EngineError> {
        let ladder = warm_ladder();
        // The workspace takes its largest size first. Growing it drops every graph captured
        // on the old buffers: bucket by bucket the ladder would keep only its last few, and a
        // long pass under traffic would send every short bucket back to a capture while its
        // requests wait. So: the longest pass (~33 KB a token for `large`, 0.5 GiB at 16,384
        // tokens), reading a quarter of its tokens (~26 KB a position, 0.1 GiB); passes of
        // short rows with many options read about one token in ten.
        let max_tokens = self.settings.max_pass_tokens;
        let longest = Bucket::for_sizes(max_tokens, max_tokens / 4);
        let cap = Bucket {
            tokens: ladder
                .iter()
                .map(|b| b.tokens)
                .fold(longest.tokens, usize::max),
            selected: ladder
                .iter()
                .map(|b| b.selected)
                .fold(longest.selected, usize::max),
        };
        self.gpu
            .bind()
            .and_then(|()| self.ensure_capacity(cap))
            .map_err(|e| EngineError::backend("cuda", e))?;
        for bucket in ladder {
            self.prepare(bucket)
                .map_err(|e| EngineError::backend("cuda", e))?;
        }
        // From here on requests wait on whatever is planned.
        self.blas.end_short_timing();
        let c = self.blas.choices();
        tracing::info!(
            families = c.families,
            long_pass = c.long_pass,
            short_pass = c.short_pass,
            own = c.own,
            fused = c.fused,
            batch_invariant = self.blas.batch_invariant(),
            "GEMM algorithms chosen (long_pass: algorithms for long passes, short_pass: short pass sizes with a faster algorithm, own: of those, with our own kernel, fused: short pass sizes with the next step in our own kernel; all of the same bits)"
        );
        Ok(())
    }

    /// Every GEMM runs one algorithm per layer, checked on the GPU to give a block of rows
    /// the same bits at other token counts and offsets; the other kernels work row by row.
    fn batch_invariant(&self) -> bool {
        self.blas.batch_invariant()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `prepare` refuses a bucket that `for_sizes` would not give; every short size a pass
    /// can take is in the ladder.
    #[test]
    fn the_warm_ladder_holds_every_short_bucket_and_only_buckets() {
        let ladder = warm_ladder();
        for b in &ladder {
            assert_eq!(Bucket::for_sizes(b.tokens, b.selected), *b);
        }
        for tokens in 1..=1024 {
            for selected in (2..=tokens.min(256)).step_by(7) {
                let b = Bucket::for_sizes(tokens, selected);
                assert!(
                    ladder.contains(&b),
                    "{tokens} tokens, {selected} read: {b:?}"
                );
            }
        }
    }
}

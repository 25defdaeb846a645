//! [`MlxEngine`]: a loaded checkpoint on one MLX device, implementing
//! [`laya_core::engine::Forward`].
//!
//! One forward packs every row's tokens into one `[T, d]` matrix (no padding), runs the
//! encoder and the decision head on it, reads the head output at position 0 and at the
//! markers, scores the markers, and runs the act head. Every MLX operation is built inside
//! `with_stream` on the engine's stream, so the same code runs on the CPU or a GPU.

use std::path::Path;
use std::time::Instant;

use laya_core::config::CheckpointConfig;
use laya_core::engine::{warm_rows, EngineError, EngineInfo, Forward, Row, RowLogits};
use mlx_rs::{Array, Device, DeviceType, Stream};

use crate::attention::{spans_from_lengths, Span};
use crate::encoder::{Encoder, Tap};
use crate::error::{ForwardError, LoadError};
use crate::head::{act_features, ActHead, DecisionHead, Scorer};
use crate::host::{add_assign, Buffers};
use crate::settings::{DeviceKind, EngineSettings, Kernels, Precision};
use crate::weights::TensorStore;

/// A Laya checkpoint loaded on one MLX device, ready to run forward passes.
///
/// Build it on the thread that will use it (MLX streams are per thread in spirit; the
/// server's engine worker owns one engine).
pub struct MlxEngine {
    config: CheckpointConfig,
    precision: Precision,
    /// The int8 settings, with `--int8`.
    int8: Option<crate::int8::Int8>,
    device: Device,
    stream: Stream,
    full_last_head_layer: bool,
    encoder: Encoder,
    type_emb: Array,
    /// `type_emb`'s values on the host (`[types, d]`, f32), for the host path.
    type_emb_host: Vec<f32>,
    head: DecisionHead,
    scorer: Scorer,
    act_head: ActHead,
    /// The host path's buffers ([`Encoder::forward_on_host`], then the head's), kept from
    /// forward to forward.
    buffers: std::sync::Mutex<Buffers>,
}

impl std::fmt::Debug for MlxEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MlxEngine")
            .field("device", &self.device)
            .field("precision", &self.precision)
            .field("int8", &self.int8)
            .field("hidden_size", &self.config.encoder.hidden_size)
            .field("layers", &self.config.encoder.num_hidden_layers)
            .finish_non_exhaustive()
    }
}

impl MlxEngine {
    /// Loads the checkpoint directory `dir` (`rl_agent_config.json`, `encoder/config.json`,
    /// `model.safetensors`), checking every tensor's name and shape against the configs.
    pub fn load(dir: &Path, settings: &EngineSettings) -> Result<MlxEngine, LoadError> {
        let started = Instant::now();
        let config = CheckpointConfig::load(dir)?;
        let enc = &config.encoder;
        if enc.head_dim().checked_rem(2) != Some(0) {
            return Err(LoadError::Unsupported(format!(
                "RoPE needs an even head dim, got {}",
                enc.head_dim()
            )));
        }
        if enc.layer_kinds.len() != enc.num_hidden_layers {
            return Err(LoadError::Unsupported(
                "one layer kind per encoder layer is needed".into(),
            ));
        }
        let device = match settings.device {
            DeviceKind::Default => Device::try_default().map_err(|source| LoadError::Device {
                device: "default".into(),
                source,
            })?,
            DeviceKind::Cpu => Device::cpu(),
            DeviceKind::Gpu => Device::gpu(),
        };
        let stream =
            Stream::try_default_on_device(&device).map_err(|source| LoadError::Device {
                device: format!("{device}"),
                source,
            })?;
        let on_gpu = matches!(device.get_type(), Ok(DeviceType::Gpu));
        let missing = crate::backend::missing();
        if on_gpu && !missing.is_empty() {
            tracing::warn!(
                ?missing,
                "MLX settings the engine relies on are not set: call laya_mlx::backend::configure_process() first"
            );
        }
        let precision = settings.precision.unwrap_or(if on_gpu {
            Precision::F16
        } else {
            Precision::F32
        });

        // The scorer and the act head are tiny: keep them in f32 at every precision. So are
        // the norms and the type embedding, which act on the f32 residual stream.
        let in_f32 = |name: &str| {
            name.starts_with("scorer.")
                || name.starts_with("act_head.")
                || name.starts_with("type_emb.")
                || name.split('.').any(|part| {
                    matches!(
                        part,
                        "norm" | "attn_norm" | "mlp_norm" | "final_norm" | "norm1" | "norm2"
                    )
                })
        };
        let host_gemm = match settings.host_gemm {
            Some(false) => None,
            asked => {
                let kernel = settings
                    .host_gemm_kernel
                    .or_else(crate::f32_linear::Kernel::detect)
                    .filter(|_| !on_gpu && precision == Precision::F32);
                if let Some(kernel) = kernel.filter(|k| !k.available()) {
                    return Err(LoadError::Unsupported(format!(
                        "this CPU has no {} kernel",
                        kernel.name()
                    )));
                }
                if kernel.is_none() && asked == Some(true) {
                    return Err(LoadError::Unsupported(
                        "host GEMMs run on the CPU in f32, on a CPU with AVX2 and FMA or AVX-512"
                            .into(),
                    ));
                }
                kernel
            }
        };
        let kernels = Kernels {
            padded: settings.padded_attention.unwrap_or(on_gpu),
            contiguous_heads: settings.contiguous_heads.unwrap_or(on_gpu),
            host_math: settings.host_math.unwrap_or(!on_gpu),
            upcast: !on_gpu && precision == Precision::F16,
            int8: settings.int8,
            host_gemm,
        };
        if let Some(int8) = settings.int8 {
            if on_gpu || precision != Precision::F32 {
                return Err(LoadError::Unsupported(
                    "int8 runs on the CPU, with f32 everywhere else: not on a GPU or in f16".into(),
                ));
            }
            tracing::info!(
                kernel = int8.kernel.name(),
                activations = ?int8.activations,
                "int8 linear layers"
            );
        }
        // The token embeddings are only gathered, and the gathered rows converted to f32
        // (`Encoder::forward`): converting the whole table first gives the same values and,
        // in f32 from an f16 file, holds 98 MiB more for ModernBERT-large's 50,368 rows.
        //
        // Likewise the weights of the linear layers the host computes: they are packed into
        // the host's own f32 (or int8) copy as they are read, so an f32 copy in MLX first
        // would only raise the peak (to 2.5 GiB for ModernBERT-large).
        let as_stored = |name: &str| {
            name == "encoder.embeddings.tok_embeddings.weight"
                || (host_gemm.is_some() && host_linear_weight(name))
        };
        let mut store =
            TensorStore::load(dir, &config, precision.dtype(), in_f32, as_stored, &stream)?;
        let (encoder, type_emb, head, scorer, act_head) = mlx_rs::with_stream(&stream, || {
            Ok::<_, LoadError>((
                Encoder::load(&mut store, enc, settings.sliding_attention, kernels)?,
                store.take("type_emb.weight")?,
                DecisionHead::load(
                    &mut store,
                    enc.hidden_size,
                    config.agent.head_layers,
                    kernels,
                )?,
                Scorer::load(&mut store, kernels)?,
                ActHead::load(&mut store)?,
            ))
        })?;
        drop(store);
        let type_emb_host = mlx_rs::with_stream(&stream, || {
            read_f32(&type_emb.as_dtype(mlx_rs::Dtype::Float32)?, "type_emb")
        })
        .map_err(|e| LoadError::Unsupported(format!("reading type_emb: {e}")))?;
        crate::backend::release_free_memory();
        tracing::info!(
            dir = %dir.display(),
            device = %device,
            precision = precision.name(),
            host_gemm = host_gemm.map_or("mlx", |k| k.name()),
            hidden = enc.hidden_size,
            layers = enc.num_hidden_layers,
            ms = started.elapsed().as_millis() as u64,
            "checkpoint loaded"
        );
        Ok(MlxEngine {
            config,
            precision,
            int8: settings.int8,
            device,
            stream,
            full_last_head_layer: settings.full_last_head_layer,
            encoder,
            type_emb,
            type_emb_host,
            head,
            scorer,
            act_head,
            buffers: std::sync::Mutex::default(),
        })
    }

    /// The compute precision in use.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// How the linear layers run in int8 (`--int8`), or `None`.
    pub fn int8(&self) -> Option<crate::int8::Int8> {
        self.int8
    }

    /// The MLX device the forward runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device in upstream's (PyTorch's) vocabulary, as `/health` reports it: `cpu`, `cuda`
    /// (MLX's CUDA backend) or `mps` (Metal).
    pub fn device_name(&self) -> String {
        match self.device.get_type() {
            Ok(DeviceType::Gpu) => match env!("LAYA_MLX_BACKEND") {
                "cuda" => "cuda".to_owned(),
                "metal" => "mps".to_owned(),
                other => other.to_owned(),
            },
            _ => "cpu".to_owned(),
        }
    }

    /// The checkpoint's configs.
    pub fn config(&self) -> &CheckpointConfig {
        &self.config
    }

    /// Runs one pass over `rows` (each row exactly its own tokens and markers).
    pub fn run(&self, rows: &[Row]) -> Result<Vec<RowLogits>, ForwardError> {
        let started = Instant::now();
        let out = self.run_with(rows, None)?;
        tracing::debug!(
            rows = rows.len(),
            tokens = rows.iter().map(|r| r.ids.len()).sum::<usize>(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "forward"
        );
        Ok(out)
    }

    fn check_rows(&self, rows: &[Row]) -> Result<(), ForwardError> {
        // MLX indexes with i32; four arrays of a row's length must fit.
        laya_core::engine::check_rows(rows, self.encoder.vocab_size(), i32::MAX as usize / 4)
            .map_err(|(row, reason)| ForwardError::InvalidRow { row, reason })
    }

    /// [`MlxEngine::run`] with a look at the encoder's residual stream after the embeddings
    /// and after each half of each layer: `tap(name, array)` sees each one as it is built
    /// (it may evaluate it, which also splits the forward into one evaluation per tap).
    /// For probes that compare devices layer by layer.
    pub fn run_tapped(
        &self,
        rows: &[Row],
        tap: &mut dyn FnMut(&str, &Array) -> Result<(), mlx_rs::error::Exception>,
    ) -> Result<Vec<RowLogits>, ForwardError> {
        self.run_with(rows, Some(tap))
    }

    fn run_with(
        &self,
        rows: &[Row],
        tap: Option<&mut Tap>,
    ) -> Result<Vec<RowLogits>, ForwardError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        self.check_rows(rows)?;
        mlx_rs::with_stream(&self.stream, || self.run_on_stream(rows, tap))
    }

    fn run_on_stream(
        &self,
        rows: &[Row],
        tap: Option<&mut Tap>,
    ) -> Result<Vec<RowLogits>, ForwardError> {
        let spans = spans_from_lengths(rows.iter().map(|r| r.ids.len()));
        let total: usize = spans.iter().map(|s| s.len).sum();
        let ids: Vec<u32> = rows.iter().flat_map(|r| r.ids.iter().copied()).collect();
        let qtypes: Vec<u32> = rows
            .iter()
            .flat_map(|r| std::iter::repeat_n(r.qtype.index() as u32, r.ids.len()))
            .collect();
        // Positions the answers read, row by row: position 0, then each marker.
        let mut select = Vec::new();
        let mut select_lens = Vec::with_capacity(rows.len());
        for (r, s) in rows.iter().zip(&spans) {
            select.push(s.start as u32);
            select.extend(r.markers.iter().map(|&m| (s.start + m) as u32));
            select_lens.push(1 + r.markers.len());
        }
        let select_spans: Vec<Span> = spans_from_lengths(select_lens);

        let t = total as i32;
        let ids = Array::from_slice(&ids, &[t]);
        // On the host path the residual stream stays in the host's buffers from the
        // encoder's first layer (`h` is `None`: it is in `buffers.residual`) to the head's
        // last, where the head runs there too.
        let mut buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        let h = if self.encoder.runs_on_host() {
            self.encoder
                .forward_on_host(&ids, &spans, tap, &mut buffers)?;
            self.add_type_embedding(&mut buffers.residual, &qtypes);
            None
        } else {
            let h = self.encoder.forward(&ids, &spans, tap)?;
            // §3.2: the type embedding is added after the final norm, at every position.
            Some(
                h.add(
                    self.type_emb
                        .take_axis(Array::from_slice(&qtypes, &[t]), 0)?,
                )?,
            )
        };
        let sel = match h {
            None if self.head.runs_on_host() => {
                let select: Vec<usize> = select.iter().map(|&p| p as usize).collect();
                self.head.forward_on_host(
                    &mut buffers,
                    &spans,
                    &select,
                    &select_spans,
                    self.full_last_head_layer,
                )?
            }
            h => {
                let h = h.unwrap_or_else(|| {
                    let d = self.config.encoder.hidden_size as i32;
                    Array::from_slice(&buffers.residual, &[t, d])
                });
                let select = Array::from_slice(&select, &[select.len() as i32]);
                self.head.forward(
                    &h,
                    &spans,
                    &select,
                    &select_spans,
                    self.full_last_head_layer,
                )?
            }
        };
        drop(buffers);

        let pooled_idx: Vec<u32> = select_spans.iter().map(|s| s.start as u32).collect();
        let marker_idx: Vec<u32> = select_spans
            .iter()
            .flat_map(|s| (s.start + 1..s.start + s.len).map(|i| i as u32))
            .collect();
        let pooled = sel
            .take_axis(Array::from_slice(&pooled_idx, &[rows.len() as i32]), 0)?
            .as_dtype(mlx_rs::Dtype::Float32)?;
        let markers = sel.take_axis(
            Array::from_slice(&marker_idx, &[marker_idx.len() as i32]),
            0,
        )?;
        let (logits, pooled) = if self.scorer.runs_on_host() {
            let markers = markers.as_dtype(mlx_rs::Dtype::Float32)?;
            mlx_rs::transforms::eval([&markers, &pooled])?;
            let markers = read_f32(&markers, "the scorer's input")?;
            let logits =
                self.scorer
                    .forward_on_host(&markers)
                    .ok_or_else(|| ForwardError::Readback {
                        what: "option logits",
                        reason: "the scorer's layers are not on the host".into(),
                    })?;
            (logits, read_f32(&pooled, "pooled output")?)
        } else {
            let logits = self.scorer.forward(&markers)?;
            // One evaluation for both; the act head runs on the host from here.
            mlx_rs::transforms::eval([&logits, &pooled])?;
            (
                read_f32(&logits, "option logits")?,
                read_f32(&pooled, "pooled output")?,
            )
        };

        let mut feats = Vec::with_capacity(rows.len());
        let mut per_row = Vec::with_capacity(rows.len());
        let mut at = 0;
        for r in rows {
            let row_logits = logits[at..at + r.markers.len()].to_vec();
            at += r.markers.len();
            feats.push(act_features(&row_logits));
            per_row.push(row_logits);
        }
        let act = self.act_head.forward(&pooled, &feats);
        let n_act = self.config.agent.n_act;
        if act.len() != rows.len() * n_act {
            return Err(ForwardError::Readback {
                what: "act logits",
                reason: format!("{} values for {} rows of {n_act}", act.len(), rows.len()),
            });
        }
        Ok(per_row
            .into_iter()
            .zip(act.chunks(n_act))
            .map(|(logits, a)| RowLogits {
                logits,
                act_logits: a.to_vec(),
            })
            .collect())
    }
}

impl MlxEngine {
    /// §3.2's type embedding added to `h` (`[T, d]` on the host) at every position, token
    /// `i` taking row `qtypes[i]`: the same f32 adds as MLX's.
    fn add_type_embedding(&self, h: &mut [f32], qtypes: &[u32]) {
        let d = self.config.encoder.hidden_size;
        for (x, &q) in h.chunks_exact_mut(d).zip(qtypes) {
            let q = q as usize;
            add_assign(x, &self.type_emb_host[q * d..(q + 1) * d]);
        }
    }
}

fn read_f32(a: &Array, what: &'static str) -> Result<Vec<f32>, ForwardError> {
    let a = a.contiguous()?;
    a.try_as_slice::<f32>()
        .map(<[f32]>::to_vec)
        .map_err(|e| ForwardError::Readback {
            what,
            reason: e.to_string(),
        })
}

impl Forward for MlxEngine {
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<RowLogits>, EngineError> {
        self.run(rows).map_err(|e| EngineError::backend("mlx", e))
    }

    /// Where the encoder, the decision head and the scorer all run on the host: there
    /// every step is per token or per row (the embeddings, the norms, attention within a
    /// row), and the host GEMMs compute each row alone, in the same order whatever rows
    /// share the call. MLX's own GEMMs (OpenBLAS, Metal) give no such promise.
    fn batch_invariant(&self) -> bool {
        self.encoder.runs_on_host() && self.head.runs_on_host() && self.scorer.runs_on_host()
    }

    fn info(&self) -> EngineInfo {
        EngineInfo {
            engine: "mlx",
            device: self.device_name(),
            precision: match self.int8 {
                Some(int8) => int8.precision(),
                None => self.precision.name(),
            },
        }
    }

    /// On the CPU one short row compiles what there is to compile. On a GPU every new batch
    /// layout also costs kernel selection and a CUDA-graph build on first use (30-160 ms each
    /// on an H200), so a fixed ladder of layouts runs, in a fixed order so MLX's on-disk
    /// kernel cache sees the same kernels in the same order on every start: 1, 4 and 10 rows
    /// of about 16, 150, 300 and 600 tokens, of unequal lengths like real questions.
    fn warm(&mut self) -> Result<(), EngineError> {
        let on_gpu = matches!(self.device.get_type(), Ok(DeviceType::Gpu));
        let ladder: Vec<Vec<usize>> = if on_gpu {
            [16, 150, 300, 600]
                .into_iter()
                .flat_map(|len| [1, 4, 10].map(|n| (0..n).map(|i| len - i).collect()))
                .collect()
        } else {
            vec![vec![6]]
        };
        for lengths in ladder {
            self.forward(&warm_rows(&lengths))?;
        }
        Ok(())
    }
}

/// Whether `name` is the weight of a linear layer of the encoder or the decision head (the
/// layers [`crate::layers::Linear::for_model`] builds).
fn host_linear_weight(name: &str) -> bool {
    let encoder = name.starts_with("encoder.layers.")
        && [
            ".attn.Wqkv.weight",
            ".attn.Wo.weight",
            ".mlp.Wi.weight",
            ".mlp.Wo.weight",
        ]
        .iter()
        .any(|s| name.ends_with(s));
    let head = name.starts_with("head.layers.")
        && [
            ".self_attn.in_proj_weight",
            ".self_attn.out_proj.weight",
            ".linear1.weight",
            ".linear2.weight",
        ]
        .iter()
        .any(|s| name.ends_with(s));
    encoder || head
}

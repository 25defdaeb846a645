//! The checkpoint on the GPU, in the precision each part runs at: the encoder's and the
//! decision head's linear weights (and the embedding table) in f16 as stored, the norms, the
//! type embedding, the scorer and the act head in f32, as upstream's fp16 autocast keeps them.
//! Also the RoPE tables, computed in f32 as torch does (`model.md` §5.16).

use laya_core::checkpoint::CheckpointTensors;
use laya_core::config::{rope_table, CheckpointConfig, LayerKind, MAX_POSITIONS};

use crate::error::{CudaError, LoadError};
use crate::gpu::DeviceBuf;

/// One encoder layer.
#[derive(Debug)]
pub struct EncoderLayer {
    /// `None` on layer 0, which has no `attn_norm`.
    pub attn_norm: Option<DeviceBuf>,
    pub wqkv: DeviceBuf,
    pub wo: DeviceBuf,
    pub mlp_norm: DeviceBuf,
    pub wi: DeviceBuf,
    pub wo_mlp: DeviceBuf,
    /// Sliding-window layer (local theta, ±half window) or global.
    pub sliding: bool,
}

/// One decision-head layer (`TransformerEncoderLayer`, pre-norm, ReLU).
#[derive(Debug)]
pub struct HeadLayer {
    pub norm1_w: DeviceBuf,
    pub norm1_b: DeviceBuf,
    /// `in_proj_weight` `[3d, d]`, f16: rows `0..d` project queries, `d..3d` keys and values.
    pub in_w: DeviceBuf,
    /// `in_proj_bias` `[3d]`, f16.
    pub in_b: DeviceBuf,
    pub out_w: DeviceBuf,
    /// f32: added to the f32 stream in the GEMM's epilogue.
    pub out_b: DeviceBuf,
    pub norm2_w: DeviceBuf,
    pub norm2_b: DeviceBuf,
    pub l1_w: DeviceBuf,
    /// f16, with the ReLU in the epilogue.
    pub l1_b: DeviceBuf,
    pub l2_w: DeviceBuf,
    /// f32.
    pub l2_b: DeviceBuf,
}

/// RoPE `cos`/`sin` tables, `[position][head_dim / 2]` f32.
#[derive(Debug)]
pub struct Rope {
    pub cos: DeviceBuf,
    pub sin: DeviceBuf,
}

/// Every tensor of the forward pass, on the device.
#[derive(Debug)]
pub struct Weights {
    pub emb: DeviceBuf,
    pub emb_norm: DeviceBuf,
    pub layers: Vec<EncoderLayer>,
    pub final_norm: DeviceBuf,
    pub type_emb: DeviceBuf,
    pub head: Vec<HeadLayer>,
    pub scorer_norm_w: DeviceBuf,
    pub scorer_norm_b: DeviceBuf,
    pub scorer_w1: DeviceBuf,
    pub scorer_b1: DeviceBuf,
    pub scorer_w3: DeviceBuf,
    pub scorer_b3: DeviceBuf,
    /// `act_head.0.weight`, `[act_hidden, d + 4]`.
    pub act_w0: DeviceBuf,
    pub act_b0: DeviceBuf,
    pub act_w2: DeviceBuf,
    pub act_b2: DeviceBuf,
    /// Output width of `act_head.0`.
    pub act_hidden: usize,
    pub rope_global: Rope,
    pub rope_local: Rope,
    /// Rows of the RoPE tables: positions past this cannot run.
    pub max_positions: usize,
    /// Bytes on the device.
    pub bytes: usize,
}

struct Reader<'a> {
    t: &'a CheckpointTensors,
    bytes: usize,
}

impl Reader<'_> {
    fn half(&mut self, name: &str) -> Result<DeviceBuf, LoadError> {
        let b = DeviceBuf::from_slice(&self.t.read_f16_bits(name)?)?;
        self.bytes += b.bytes();
        Ok(b)
    }
    fn float(&mut self, name: &str) -> Result<DeviceBuf, LoadError> {
        let b = DeviceBuf::from_slice(&self.t.read_f32(name)?)?;
        self.bytes += b.bytes();
        Ok(b)
    }
    fn upload<T: Copy>(&mut self, data: &[T]) -> Result<DeviceBuf, CudaError> {
        let b = DeviceBuf::from_slice(data)?;
        self.bytes += b.bytes();
        Ok(b)
    }
}

impl Weights {
    /// Reads every tensor of the checkpoint (already checked against `cfg`) to the device.
    pub fn load(t: &CheckpointTensors, cfg: &CheckpointConfig) -> Result<Weights, LoadError> {
        let e = &cfg.encoder;
        let max_positions = e.max_position_embeddings.max(cfg.agent.max_len).max(1);
        // The RoPE tables below are built whole for this many positions. Configs read from
        // files are bounded when they are read; this guards configs built in code, which
        // would otherwise abort the process on the allocation (1e12 positions), and is
        // checked before anything is uploaded.
        if max_positions > MAX_POSITIONS {
            return Err(LoadError::Unsupported(format!(
                "RoPE tables for {max_positions} positions (max_position_embeddings {}, \
                 max_len {}); at most {MAX_POSITIONS}",
                e.max_position_embeddings, cfg.agent.max_len
            )));
        }
        let mut r = Reader { t, bytes: 0 };
        let mut layers = Vec::with_capacity(e.num_hidden_layers);
        for l in 0..e.num_hidden_layers {
            let p = format!("encoder.layers.{l}");
            layers.push(EncoderLayer {
                attn_norm: if l == 0 {
                    None
                } else {
                    Some(r.float(&format!("{p}.attn_norm.weight"))?)
                },
                wqkv: r.half(&format!("{p}.attn.Wqkv.weight"))?,
                wo: r.half(&format!("{p}.attn.Wo.weight"))?,
                mlp_norm: r.float(&format!("{p}.mlp_norm.weight"))?,
                wi: r.half(&format!("{p}.mlp.Wi.weight"))?,
                wo_mlp: r.half(&format!("{p}.mlp.Wo.weight"))?,
                sliding: e.layer_kinds[l] == LayerKind::Sliding,
            });
        }
        let mut head = Vec::with_capacity(cfg.agent.head_layers);
        for j in 0..cfg.agent.head_layers {
            let p = format!("head.layers.{j}");
            head.push(HeadLayer {
                norm1_w: r.float(&format!("{p}.norm1.weight"))?,
                norm1_b: r.float(&format!("{p}.norm1.bias"))?,
                in_w: r.half(&format!("{p}.self_attn.in_proj_weight"))?,
                in_b: r.half(&format!("{p}.self_attn.in_proj_bias"))?,
                out_w: r.half(&format!("{p}.self_attn.out_proj.weight"))?,
                out_b: r.float(&format!("{p}.self_attn.out_proj.bias"))?,
                norm2_w: r.float(&format!("{p}.norm2.weight"))?,
                norm2_b: r.float(&format!("{p}.norm2.bias"))?,
                l1_w: r.half(&format!("{p}.linear1.weight"))?,
                l1_b: r.half(&format!("{p}.linear1.bias"))?,
                l2_w: r.half(&format!("{p}.linear2.weight"))?,
                l2_b: r.float(&format!("{p}.linear2.bias"))?,
            });
        }
        let act_hidden = t.shape("act_head.0.weight")?[0];
        let hd = e.head_dim();
        let (gc, gs) = rope_table(e.rope_theta_global, hd, max_positions);
        let (lc, ls) = rope_table(e.rope_theta_local, hd, max_positions);
        Ok(Weights {
            emb: r.half("encoder.embeddings.tok_embeddings.weight")?,
            emb_norm: r.float("encoder.embeddings.norm.weight")?,
            layers,
            final_norm: r.float("encoder.final_norm.weight")?,
            type_emb: r.float("type_emb.weight")?,
            head,
            scorer_norm_w: r.float("scorer.0.weight")?,
            scorer_norm_b: r.float("scorer.0.bias")?,
            scorer_w1: r.float("scorer.1.weight")?,
            scorer_b1: r.float("scorer.1.bias")?,
            scorer_w3: r.float("scorer.3.weight")?,
            scorer_b3: r.float("scorer.3.bias")?,
            act_w0: r.float("act_head.0.weight")?,
            act_b0: r.float("act_head.0.bias")?,
            act_w2: r.float("act_head.2.weight")?,
            act_b2: r.float("act_head.2.bias")?,
            act_hidden,
            rope_global: Rope {
                cos: r.upload(&gc)?,
                sin: r.upload(&gs)?,
            },
            rope_local: Rope {
                cos: r.upload(&lc)?,
                sin: r.upload(&ls)?,
            },
            max_positions,
            bytes: r.bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config built in code past the bound is refused before any table or upload (no GPU
    /// is touched): 1e12 positions aborted the process on the allocation.
    #[test]
    fn rope_tables_past_the_bound_are_refused_before_anything_is_built() {
        let dir = laya_fixtures::fixtures_dir()
            .join("checkpoints")
            .join("tiny");
        let mut cfg = CheckpointConfig::load(&dir).expect("fixture configs");
        let t = CheckpointTensors::open(&dir, &cfg).expect("fixture checkpoint");
        cfg.encoder.max_position_embeddings = 1_000_000_000_000;
        let e = Weights::load(&t, &cfg).expect_err("must be refused");
        assert!(
            matches!(&e, LoadError::Unsupported(m) if m.contains("max_position_embeddings")),
            "{e}"
        );
        cfg.encoder.max_position_embeddings = 8192;
        cfg.agent.max_len = MAX_POSITIONS + 1;
        assert!(Weights::load(&t, &cfg).is_err());
    }
}

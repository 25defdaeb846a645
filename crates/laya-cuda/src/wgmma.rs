//! `gemm_wg` (`kernels.cu`): a GEMM kernel of our own, on Hopper's `wgmma`, that short
//! passes may run instead of cuBLASLt's. cuBLASLt's kernel for a layer is pinned for batch
//! invariance and suits hundreds of rows and more; on the ~200 rows of one short request it
//! leaves most multiprocessors idle. `gemm_wg` gives each block 64 rows and 32 or 64 outputs,
//! so such a pass covers the GPU. With `CudaSettings::gemm_own` on, [`crate::gemm`] times it
//! beside cuBLASLt's candidates and takes it for a pass only where it gives the cuBLASLt bits
//! of that layer, so answers never depend on which kernel ran. Its epilogue can also do the
//! step after the GEMM ([`Then`]: the MLP's GeGLU, RoPE on the attention's queries and
//! keys), sparing that step's kernel where [`crate::gemm::Blas::run_then`] finds it faster
//! and of the same bits.

use cudarc::driver::sys::{CUfunction, CUstream};

use crate::error::CudaError;
use crate::gemm::{Gemm, Kind, Then, HEAD_DIM};
use crate::gpu::{Args, Module};

/// `gemm_wg`'s widths: the outputs a block computes (its rows are always [`Tile::ROWS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tile {
    N32,
    N64,
}

impl Tile {
    pub const ALL: [Tile; 2] = [Tile::N32, Tile::N64];
    const ROWS: usize = 64;
    /// The k slice one stage holds (one 128-byte row a matrix row); `k` must be a multiple.
    const K: usize = 64;
    /// The stages of either width's kernel (`kernels.cu`'s `gemm_wg<BN, ST>`).
    const STAGES: usize = 6;

    fn outputs(self) -> usize {
        match self {
            Tile::N32 => 32,
            Tile::N64 => 64,
        }
    }

    fn kernel(self) -> &'static str {
        match self {
            Tile::N32 => "gemm_wg_n32",
            Tile::N64 => "gemm_wg_n64",
        }
    }

    /// Dynamic shared memory a block: the stages, each a k slice of both operands, and 1 KB
    /// to align them to the swizzle's period.
    fn shared_bytes(self) -> usize {
        (Tile::ROWS + self.outputs()) * Tile::K * 2 * Tile::STAGES + 1024
    }
}

/// The loaded `gemm_wg` kernels, one per [`Tile`].
#[derive(Debug, Clone, Copy)]
pub struct WgKernels {
    functions: [CUfunction; 2],
}

impl WgKernels {
    /// The kernels of `module`, which must have been compiled with them
    /// ([`crate::compile::has_wgmma`]).
    pub fn load(module: &Module) -> Result<WgKernels, CudaError> {
        let f = |t: Tile| module.function_dynamic_shared(t.kernel(), t.shared_bytes());
        Ok(WgKernels {
            functions: [f(Tile::N32)?, f(Tile::N64)?],
        })
    }

    /// Whether `tile` computes `g`: whole k slices and whole blocks of outputs, and operands
    /// aligned for its 16-byte copies and paired stores.
    pub fn fits(tile: Tile, g: &Gemm) -> bool {
        g.inp.is_multiple_of(Tile::K)
            && g.out.is_multiple_of(tile.outputs())
            && g.tokens > 0
            && g.x.is_multiple_of(16)
            && g.w.is_multiple_of(16)
            && g.y.is_multiple_of(8)
            && g.bias.is_multiple_of(8)
    }

    /// Queues `g` on `stream` with blocks of `tile` (which must [`WgKernels::fits`]).
    pub fn launch(&self, tile: Tile, g: &Gemm, stream: CUstream) -> Result<(), CudaError> {
        if !WgKernels::fits(tile, g) {
            return Err(CudaError::Unavailable(format!(
                "gemm_wg {tile:?} cannot compute {} x {} -> {} here",
                g.tokens, g.inp, g.out
            )));
        }
        self.queue(
            tile,
            g,
            g.out / tile.outputs(),
            g.y,
            g.out,
            g.kind.code(),
            0,
            [0; 3],
            stream,
        )
    }

    /// Whether `tile` computes `g` followed by `then` in one kernel: `g` as
    /// [`WgKernels::fits`] has it, f16 out without a bias, and for GeGLU each block's half
    /// width of gate columns paired with the same columns of the up half.
    pub fn fits_then(tile: Tile, g: &Gemm, then: &Then) -> bool {
        let plain = g.kind == Kind::Half && WgKernels::fits(tile, g);
        match then {
            Then::GeGlu { g: out, .. } => {
                plain && (g.out / 2).is_multiple_of(tile.outputs() / 2) && out.is_multiple_of(8)
            }
            // A block is one whole head of q, k or v.
            Then::Rope { .. } => {
                plain && tile.outputs() == HEAD_DIM && g.out.is_multiple_of(3 * HEAD_DIM)
            }
        }
    }

    /// Queues `g` followed by `then` as one kernel with blocks of `tile` (which must
    /// [`WgKernels::fits_then`]): GeGLU writes only its own output, RoPE writes `g.y`.
    pub fn launch_then(
        &self,
        tile: Tile,
        g: &Gemm,
        then: &Then,
        stream: CUstream,
    ) -> Result<(), CudaError> {
        if !WgKernels::fits_then(tile, g, then) {
            return Err(CudaError::Unavailable(format!(
                "gemm_wg {tile:?} cannot compute {} x {} -> {} with {then:?} here",
                g.tokens, g.inp, g.out
            )));
        }
        match *then {
            Then::GeGlu { g: out, .. } => {
                let half = g.out / 2;
                let blocks = half / (tile.outputs() / 2);
                self.queue(tile, g, blocks, out, half, GEGLU_CODE, half, [0; 3], stream)
            }
            Then::Rope { pos, cos, sin, .. } => {
                let blocks = g.out / tile.outputs();
                let qk = g.out / 3 * 2;
                let tables = [pos, cos, sin];
                self.queue(tile, g, blocks, g.y, g.out, ROPE_CODE, qk, tables, stream)
            }
        }
    }

    /// Launches `tile`'s kernel on `g`'s operands over `blocks` blocks of outputs: rows of `n`
    /// outputs into `y`, the epilogue `kind` (`kernels.cu`'s `WG_*`), and the fused steps'
    /// `aux` and `[pos, rc, rs]` (0 where unused).
    #[allow(clippy::too_many_arguments)]
    fn queue(
        &self,
        tile: Tile,
        g: &Gemm,
        blocks: usize,
        y: u64,
        n: usize,
        kind: i32,
        aux: usize,
        [pos, rc, rs]: [u64; 3],
        stream: CUstream,
    ) -> Result<(), CudaError> {
        let grid = (blocks as u32, g.tokens.div_ceil(Tile::ROWS) as u32, 1);
        Args::new()
            .ptr(g.x)
            .ptr(g.w)
            .ptr(g.bias)
            .ptr(y)
            .i32(g.tokens as i32)
            .i32(n as i32)
            .i32(g.inp as i32)
            .i32(kind)
            .i32(aux as i32)
            .ptr(pos)
            .ptr(rc)
            .ptr(rs)
            .launch(
                self.function(tile),
                grid,
                128,
                tile.shared_bytes() as u32,
                stream,
            )
    }

    fn function(&self, tile: Tile) -> CUfunction {
        match tile {
            Tile::N32 => self.functions[0],
            Tile::N64 => self.functions[1],
        }
    }
}

/// `kernels.cu`'s `WG_GEGLU` and `WG_ROPE`.
const GEGLU_CODE: i32 = 5;
const ROPE_CODE: i32 = 6;

#[cfg(test)]
mod tests {
    use super::*;

    /// Hopper gives a multiprocessor 228 KB of shared memory, 1 KB of it reserved per block:
    /// the narrow kernel's stages must leave room for three blocks, the wide one's for two,
    /// or a short pass's blocks run in more waves than the widths were chosen for.
    #[test]
    fn stages_leave_room_for_their_blocks() {
        let per_sm = 228 * 1024;
        for (tile, blocks) in [(Tile::N32, 3), (Tile::N64, 2)] {
            let need = blocks * (tile.shared_bytes() + 1024);
            assert!(need <= per_sm, "{tile:?}: {need} bytes for {blocks} blocks");
        }
    }
}

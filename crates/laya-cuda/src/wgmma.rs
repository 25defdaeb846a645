//! `gemm_wg` (`kernels.cu`): a GEMM kernel of our own, on Hopper's `wgmma`, that short
//! passes may run instead of cuBLASLt's. cuBLASLt's kernel for a layer is pinned for batch
//! invariance and suits hundreds of rows and more; on the ~200 rows of one short request it
//! leaves most multiprocessors idle. `gemm_wg` gives each block 64 rows and 32 or 64 outputs,
//! so such a pass covers the GPU; for longer passes `gemm_tma` ([`Tile::TmaM128N128`],
//! [`Tile::TmaM192N128`]) is persistent and fed by the Tensor Memory Accelerator. With
//! `CudaSettings::gemm_own` on, [`crate::gemm`] times every form beside cuBLASLt's
//! candidates and takes one for a pass only where it gives the cuBLASLt bits of that layer,
//! so answers never depend on which kernel ran. The epilogue can also do the step after the
//! GEMM ([`Then`]: the MLP's GeGLU, RoPE on the attention's queries and keys), sparing that
//! step's kernel where [`crate::gemm::Blas::run_then`] finds it faster and of the same bits.

use cudarc::driver::sys::{CUfunction, CUstream};

use crate::error::CudaError;
use crate::gemm::{Gemm, Kind, Then, HEAD_DIM};
use crate::gpu::{self, Args, Module, TensorMap};

/// `gemm_wg`'s forms: the rows and outputs a block computes, and how its stages are filled.
/// `N32` and `N64` (64 rows) copy them with the block's own threads (`cp.async`), one block
/// a tile. The `Tma*` forms (`gemm_tma` in kernels.cu), 128 or 192 rows × 128 outputs, have
/// a producer warp ask the Tensor Memory Accelerator for them, are persistent (a grid of as
/// many blocks as the GPU holds, each walking its share of the tiles) and are launched as
/// programmatic dependents of the kernel before, so that they fetch their first weights
/// while that kernel finishes; their outputs go through a staging tile in shared memory and
/// out in whole rows, 16 bytes a thread. Every form adds up an output in the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tile {
    N32,
    N64,
    TmaM128N128,
    TmaM192N128,
}

impl Tile {
    pub const ALL: [Tile; 4] = [Tile::N32, Tile::N64, Tile::TmaM128N128, Tile::TmaM192N128];
    /// The k slice one stage holds (one 128-byte row a matrix row); `k` must be a multiple.
    const K: usize = 64;

    /// Rows a block computes (64 a consumer warpgroup).
    pub fn rows(self) -> usize {
        match self {
            Tile::N32 | Tile::N64 => 64,
            Tile::TmaM128N128 => 128,
            Tile::TmaM192N128 => 192,
        }
    }

    /// Outputs a block computes.
    pub fn outputs(self) -> usize {
        match self {
            Tile::N32 => 32,
            Tile::N64 => 64,
            Tile::TmaM128N128 | Tile::TmaM192N128 => 128,
        }
    }

    /// The form's place in [`Tile::ALL`], which lists the forms in their declared order.
    fn index(self) -> usize {
        self as usize
    }

    fn tma(self) -> bool {
        matches!(self, Tile::TmaM128N128 | Tile::TmaM192N128)
    }

    /// The stages in flight (kernels.cu's template arguments).
    fn stages(self) -> usize {
        match self {
            Tile::N32 | Tile::N64 => 6,
            Tile::TmaM128N128 | Tile::TmaM192N128 => 4,
        }
    }

    /// The alignment the output's address needs: the TMA forms write 16 bytes a thread, the
    /// others pairs of halves or floats.
    fn store_align(self) -> u64 {
        if self.tma() {
            16
        } else {
            8
        }
    }

    fn threads(self) -> u32 {
        match self {
            Tile::N32 | Tile::N64 => 128,
            // The consumer warpgroups and the producer warp.
            Tile::TmaM128N128 | Tile::TmaM192N128 => (self.rows() / 64 * 128 + 32) as u32,
        }
    }

    fn kernel(self) -> &'static str {
        match self {
            Tile::N32 => "gemm_wg_n32",
            Tile::N64 => "gemm_wg_n64",
            Tile::TmaM128N128 => "gemm_tma_m128_n128",
            Tile::TmaM192N128 => "gemm_tma_m192_n128",
        }
    }

    /// Dynamic shared memory a block: the stages, each a k slice of both operands, 1 KB to
    /// align them to the swizzle's period, and the TMA forms' two barriers a stage and
    /// staging tiles.
    fn shared_bytes(self) -> usize {
        let barriers = if self.tma() { self.stages() * 16 } else { 0 };
        (self.rows() + self.outputs()) * Tile::K * 2 * self.stages()
            + 1024
            + barriers
            + self.staging_bytes()
    }

    /// The TMA forms' staging tiles (one a consumer warpgroup) and 16 bytes to align them:
    /// their outputs leave through shared memory, a row at a time.
    fn staging_bytes(self) -> usize {
        if self.tma() {
            self.rows() / 64 * STAGE_TILE_BYTES + 16
        } else {
            0
        }
    }
}

/// The loaded `gemm_wg` kernels, one per [`Tile`].
#[derive(Debug, Clone, Copy)]
pub struct WgKernels {
    functions: [CUfunction; Tile::ALL.len()],
    /// Blocks of each form the GPU holds at once: the persistent form's grid.
    resident: [u32; Tile::ALL.len()],
}

impl WgKernels {
    /// The kernels of `module`, which must have been compiled with them
    /// ([`crate::compile::has_wgmma`]).
    pub fn load(module: &Module) -> Result<WgKernels, CudaError> {
        let mut functions = [std::ptr::null_mut(); Tile::ALL.len()];
        let mut resident = [0; Tile::ALL.len()];
        let sms = gpu::multiprocessors()?;
        for ((f, r), t) in functions.iter_mut().zip(&mut resident).zip(Tile::ALL) {
            *f = module.function_dynamic_shared(t.kernel(), t.shared_bytes())?;
            *r = sms * gpu::blocks_per_multiprocessor(*f, t.threads(), t.shared_bytes())?;
        }
        Ok(WgKernels {
            functions,
            resident,
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
            && g.y.is_multiple_of(tile.store_align())
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
                plain
                    && (g.out / 2).is_multiple_of(tile.outputs() / 2)
                    && out.is_multiple_of(tile.store_align())
            }
            // A block is whole heads, all of q and k or all of v.
            Then::Rope { .. } => {
                plain
                    && tile.outputs().is_multiple_of(HEAD_DIM)
                    && g.out.is_multiple_of(3 * HEAD_DIM)
                    && (g.out / 3 * 2).is_multiple_of(tile.outputs())
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
        let row_tiles = g.tokens.div_ceil(tile.rows()) as u32;
        let grid = if tile.tma() {
            let tiles = blocks as u32 * row_tiles;
            (tiles.min(self.resident[tile.index()]).max(1), 1, 1)
        } else {
            (blocks as u32, row_tiles, 1)
        };
        let (f, threads, shared) = (
            self.function(tile),
            tile.threads(),
            tile.shared_bytes() as u32,
        );
        let args = if tile.tma() {
            // GeGLU's blocks take half their weight rows from the gate half and half from the
            // up half, as two boxes.
            let w_box = if kind == GEGLU_CODE {
                tile.outputs() / 2
            } else {
                tile.outputs()
            };
            let x = TensorMap::f16_rows(g.x, g.tokens, g.inp, tile.rows() as u32)?;
            let w = TensorMap::f16_rows(g.w, g.out, g.inp, w_box as u32)?;
            Args::new().map(&x).map(&w)
        } else {
            Args::new().ptr(g.x).ptr(g.w)
        };
        let args = args
            .ptr(g.bias)
            .ptr(y)
            .i32(g.tokens as i32)
            .i32(n as i32)
            .i32(g.inp as i32)
            .i32(kind)
            .i32(aux as i32)
            .ptr(pos)
            .ptr(rc)
            .ptr(rs);
        if tile.tma() {
            args.launch_dependent(f, grid, threads, shared, stream)
        } else {
            args.launch(f, grid, threads, shared, stream)
        }
    }

    fn function(&self, tile: Tile) -> CUfunction {
        self.functions[tile.index()]
    }
}

/// A consumer warpgroup's staging tile: `kernels.cu`'s `WG_STAGE_BYTES`, 64 rows at its pitch
/// `WG_STAGE_ROW` (272 bytes).
const STAGE_TILE_BYTES: usize = 64 * 272;

/// `kernels.cu`'s `WG_GEGLU` and `WG_ROPE`.
const GEGLU_CODE: i32 = 5;
const ROPE_CODE: i32 = 6;

#[cfg(test)]
mod tests {
    use super::*;

    /// `WgKernels` keeps a form's kernel at its place in `Tile::ALL` and finds it by
    /// `Tile::index`.
    #[test]
    fn forms_are_listed_in_declared_order() {
        for (i, tile) in Tile::ALL.into_iter().enumerate() {
            assert_eq!(tile.index(), i, "{tile:?}");
        }
    }

    /// Hopper gives a multiprocessor 228 KB of shared memory, 1 KB of it reserved per block:
    /// each form's stages must leave room for the blocks a multiprocessor was meant to hold
    /// (three of the narrowest, one of the persistent form), or a short pass's blocks run in
    /// more waves than the forms were chosen for.
    #[test]
    fn stages_leave_room_for_their_blocks() {
        let per_sm = 228 * 1024;
        for tile in Tile::ALL {
            let blocks = match tile {
                Tile::N32 => 3,
                Tile::TmaM128N128 | Tile::TmaM192N128 => 1,
                _ => 2,
            };
            let need = blocks * (tile.shared_bytes() + 1024);
            assert!(need <= per_sm, "{tile:?}: {need} bytes for {blocks} blocks");
        }
    }
}

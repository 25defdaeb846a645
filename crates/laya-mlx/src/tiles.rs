//! The tile sweep the host's GEMM kernels share (`f32_linear.rs`, `int8.rs`): over a range of
//! rows and a range of 16-channel blocks, full tiles of `MR` rows by `NB` blocks, then what
//! is left of each, with both sizes constants so that a tile's sums stay in registers.

/// Sweeps `$blocks` in panels of `$nb` blocks (then single blocks) and `$rows` in tiles of
/// `$mr` rows (then the `$left` sizes below it), invoking `$tile!(m, nb, r, b)` for each tile:
/// `m` rows from row `r`, `nb` blocks from block `b`, both literals.
macro_rules! sweep {
    ($rows:expr, $blocks:expr, $mr:literal, $nb:literal, [$($left:literal),*], $tile:ident) => {{
        let (rows, blocks) = ($rows, $blocks);
        let mut b = blocks.start;
        while b < blocks.end {
            let full = blocks.end - b >= $nb;
            let mut r = rows.start;
            while r < rows.end {
                let left = (rows.end - r).min($mr);
                macro_rules! at {
                    ($m:literal) => {
                        if full {
                            $tile!($m, $nb, r, b)
                        } else {
                            $tile!($m, 1, r, b)
                        }
                    };
                }
                match left {
                    $($left => at!($left),)*
                    _ => at!($mr),
                }
                r += left;
            }
            b += if full { $nb } else { 1 };
        }
    }};
}

pub(crate) use sweep;

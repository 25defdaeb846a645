//! laya-mlx integration tests, linked as one binary: loading, MLX itself, parity of every
//! recorded forward pass with upstream, and end-to-end answers.

mod answers;
mod batching;
mod common;
mod f32_linear;
mod int8;
mod load;
mod mlx_smoke;
mod parity;

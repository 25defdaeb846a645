//! laya-cuda integration tests, linked as one binary: the kernels compile (NVRTC, no GPU
//! needed) and, on an NVIDIA GPU, answers against upstream.

mod compile;
mod gpu_answers;

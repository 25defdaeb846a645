//! Process-wide MLX settings the engine relies on, per backend. MLX reads them from the
//! environment once, when its backend starts, so [`configure_process`] must run before the
//! first MLX call; an operator's own value of any of them is left alone.

/// The MLX backend libmlx was built for: `cpu`, `cuda` or `metal`.
pub const BACKEND: &str = env!("LAYA_MLX_BACKEND");

/// On the CUDA backend (nothing elsewhere):
///
/// - `MLX_CUDA_USE_CUDNN_SDPA=0`: cuDNN's fused attention builds a graph for every new
///   attention shape, 150–900 ms each on an H200, so every request with a new token count
///   stalls; MLX's own attention kernels cost 30–160 ms on their first use and then serve every
///   length (measured in `results/GPU-NOTES.md`).
/// - `MLX_CUDA_GRAPH_CACHE_SIZE=4096`: MLX 0.32 counts every CUDA-graph cache miss over the
///   process's life and throws once they pass twice the capacity (400 by default), which a
///   server meeting many request shapes reaches within minutes; the throw fails every
///   later request.
///
/// On every backend, with glibc: a fixed `M_MMAP_THRESHOLD` of 16 MiB ([`MMAP_THRESHOLD`]).
///
/// Call it first thing in `main`, before any other thread exists: it may set environment
/// variables. Returns the settings in effect, for the log.
pub fn configure_process() -> Vec<(&'static str, String)> {
    let mut applied = Vec::new();
    if let Some(threshold) = fix_mmap_threshold() {
        applied.push(("M_MMAP_THRESHOLD", threshold.to_string()));
    }
    for &(name, value) in defaults() {
        match std::env::var(name) {
            Ok(v) if !v.is_empty() => applied.push((name, v)),
            _ => {
                // Called before any other thread exists (see the module docs).
                std::env::set_var(name, value);
                applied.push((name, value.to_owned()));
            }
        }
    }
    applied
}

/// The allocation size from which glibc's malloc maps memory of its own for each block,
/// returned to the system when the block is freed.
///
/// glibc raises its threshold to the size of every mapped block freed (up to 32 MiB), so
/// after the first forward the per-layer buffers below 32 MiB (the residual stream, attention
/// outputs: 22 MB each at 5,500 tokens) come from the heap, which keeps what they leave.
/// Fixed at 16 MiB, peak RSS of ten questions over 512 tokens on ModernBERT-large in f32 went
/// from 2,052 to 1,960 MiB at no measurable cost in time (results/CPU.md).
pub const MMAP_THRESHOLD: usize = 16 << 20;

/// Sets [`MMAP_THRESHOLD`] unless the operator tuned malloc (`GLIBC_TUNABLES` naming
/// `mmap_threshold`, or `MALLOC_MMAP_THRESHOLD_`); returns it when set.
fn fix_mmap_threshold() -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let tuned = std::env::var("GLIBC_TUNABLES").is_ok_and(|v| v.contains("mmap_threshold"))
            || std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some();
        // SAFETY: mallopt only changes malloc's parameters; it returns 0 on failure.
        if !tuned && unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as i32) } == 1 {
            return Some(MMAP_THRESHOLD);
        }
    }
    None
}

/// Returns the heap's free pages to the system (glibc's `malloc_trim`): after a checkpoint
/// load, which frees the file's copy of every tensor it converts or packs. Those copies are
/// below [`MMAP_THRESHOLD`], so they come from the heap, which keeps freed memory between
/// blocks still in use.
pub(crate) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns unused pages; it does not touch live blocks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Points MLX's on-disk cache of compiled GPU kernels (`MLX_PTX_CACHE_DIR`) at `dir`. MLX
/// reads it at its first run-time compilation; like [`configure_process`], call it before any
/// other thread exists.
pub fn set_kernel_cache(dir: &std::path::Path) {
    std::env::set_var("MLX_PTX_CACHE_DIR", dir);
}

fn defaults() -> &'static [(&'static str, &'static str)] {
    match BACKEND {
        "cuda" => &[
            ("MLX_CUDA_USE_CUDNN_SDPA", "0"),
            ("MLX_CUDA_GRAPH_CACHE_SIZE", "4096"),
        ],
        _ => &[],
    }
}

/// The settings of [`configure_process`] absent from the environment: a program that loads an
/// engine without calling it first.
pub(crate) fn missing() -> Vec<&'static str> {
    defaults()
        .iter()
        .filter(|(name, _)| std::env::var_os(name).is_none_or(|v| v.is_empty()))
        .map(|(name, _)| *name)
        .collect()
}

/// Ends the process with `code` once everything worth keeping is flushed, without running
/// C++ static destructors or `atexit` handlers.
///
/// Those destructors tear GPU libraries down in an order of their own: MLX 0.32's per-stream
/// command encoders synchronize their CUDA stream when destroyed, after the CUDA runtime has
/// shut down ("cudaStreamSynchronize failed: driver shutting down", SIGABRT), and a process
/// that had run the CUDA engine ended with a segmentation fault in 5 of 12 clean shutdowns
/// when they ran (the engine then still lived on its worker thread). The caller has dropped
/// its engines already; there is nothing left for the destructors to do.
pub fn exit(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit only ends the process; nothing runs after it.
    unsafe { libc::_exit(code) }
}

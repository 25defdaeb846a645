//! The kernels of `kernels.cu`, compiled by NVRTC for the GPU at hand and cached on disk.
//!
//! NVRTC turns the source into a cubin for exactly this device's architecture (`sm_90` on an
//! H100/H200), so the driver has no PTX to JIT at start and the code can use the chip's own
//! instructions. The cubin is stored under the cache directory, named by the SHA-256 of
//! everything that shapes it (source, options, NVRTC version), so a restart loads it in
//! milliseconds and a changed kernel can never load a stale binary.

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};

use cudarc::nvrtc::sys as nvrtc;
use sha2::{Digest, Sha256};

use crate::error::CudaError;

/// The source of every kernel of the forward pass.
pub const KERNELS: &str = include_str!("kernels.cu");

/// A compiled module image for one architecture.
#[derive(Debug)]
pub struct Compiled {
    /// The cubin.
    pub image: Vec<u8>,
    /// Whether it came from the disk cache.
    pub cached: bool,
    /// The cache file, when there is a cache.
    pub path: Option<PathBuf>,
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Lower-case hex digits of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The cubin in a cache file's bytes, if its trailing checksum holds.
fn verified(mut file: Vec<u8>) -> Option<Vec<u8>> {
    if file.len() <= 32 {
        return None;
    }
    let sum = file.split_off(file.len() - 32);
    (sha256(&file)[..] == sum[..]).then_some(file)
}

fn nvrtc_check(r: nvrtc::nvrtcResult, what: &str) -> Result<(), CudaError> {
    if r == nvrtc::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::Compile(format!("{what}: {r:?}")))
    }
}

/// NVRTC's version, `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    nvrtc_check(
        unsafe { nvrtc::nvrtcVersion(&mut major, &mut minor) },
        "nvrtcVersion",
    )?;
    Ok((major, minor))
}

/// The options NVRTC gets for compute capability `cc` (e.g. `(9, 0)`) and a model of hidden
/// size `hidden`: the row kernels hold a row in registers, sized to the model
/// (`LAYA_MAXC` 256-wide chunks), so they use no more registers than the row needs; the
/// tensor-core attention asks for as many blocks a multiprocessor as its shared memory
/// allows there (`LAYA_ATT_BLOCKS`).
fn options(cc: (i32, i32), hidden: usize) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture=sm_{}{}", cc.0, cc.1),
        format!("-DLAYA_MAXC={}", hidden.div_ceil(256).clamp(1, 8)),
        format!("-DLAYA_ATT_BLOCKS={}", attention_blocks(cc)),
        "--std=c++17".into(),
        // No --use_fast_math: erf, exp and division stay exact, as upstream's are.
        "-default-device".into(),
    ];
    if has_wgmma(cc) {
        // wgmma exists only in the arch-specific target, whose code runs on this very
        // compute capability and no other; the engine compiles for the GPU at hand anyway.
        opts[0].push('a');
        opts.push("-DLAYA_WGMMA".into());
    }
    opts
}

/// Whether the kernels for compute capability `cc` include `gemm_wg`, the Hopper GEMM of the
/// short passes (`wgmma` is Hopper's alone: Blackwell has other tensor-core instructions).
pub fn has_wgmma(cc: (i32, i32)) -> bool {
    cc == (9, 0)
}

/// Blocks of `attention_mma` (45 KB of shared memory each, 1 KB more reserved) that fit one
/// multiprocessor's shared memory: 228 KB on Hopper and the data-centre Blackwells, 164 KB on
/// the A100 and Orin, about 100 KB on the other Ampere, Ada and consumer parts. Asking for
/// more would only cap the kernel's registers below what it needs (it spills at 128 on
/// sm_80) without another block to show for it. Hopper's `attention_wg` (42 KB) takes the
/// same four, at 120 registers.
fn attention_blocks(cc: (i32, i32)) -> u32 {
    match cc {
        (9, _) | (10, _) | (11, _) => 4,
        (8, 0) | (8, 7) => 3,
        _ => 2,
    }
}

/// Compiles [`KERNELS`] for compute capability `cc` and hidden size `hidden`, through the
/// cache in `cache_dir` when one is given (created if missing; a cache that cannot be
/// written is only logged).
pub fn compile(
    cc: (i32, i32),
    hidden: usize,
    cache_dir: Option<&Path>,
) -> Result<Compiled, CudaError> {
    let opts = options(cc, hidden);
    let version = nvrtc_version()?;
    let mut h = Sha256::new();
    h.update(KERNELS.as_bytes());
    for o in &opts {
        h.update(o.as_bytes());
        h.update([0]);
    }
    h.update(format!("nvrtc {}.{}", version.0, version.1).as_bytes());
    let key = hex(&h.finalize());
    let path: Option<PathBuf> = cache_dir.map(|d| d.join(format!("laya-cuda-{key}.cubin")));
    if let Some(p) = &path {
        match std::fs::read(p).ok().map(verified) {
            Some(Some(image)) => {
                tracing::debug!(path = %p.display(), "kernels loaded from the cache");
                return Ok(Compiled {
                    image,
                    cached: true,
                    path,
                });
            }
            Some(None) => {
                tracing::warn!(path = %p.display(), "damaged kernel cache file: recompiling");
                let _ = std::fs::remove_file(p);
            }
            None => {}
        }
    }
    let started = std::time::Instant::now();
    let image = nvrtc_compile(KERNELS, &opts)?;
    tracing::info!(
        arch = %format!("sm_{}{}", cc.0, cc.1),
        nvrtc = %format!("{}.{}", version.0, version.1),
        ms = started.elapsed().as_millis() as u64,
        "kernels compiled"
    );
    if let (Some(p), Some(dir)) = (&path, cache_dir) {
        // Write then rename, so a concurrent start never reads half a file.
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        let mut file = image.clone();
        file.extend_from_slice(&sha256(&image));
        let stored = std::fs::create_dir_all(dir)
            .and_then(|_| std::fs::write(&tmp, &file))
            .and_then(|_| std::fs::rename(&tmp, p));
        if let Err(e) = stored {
            tracing::warn!(path = %p.display(), error = %e, "cannot cache the compiled kernels");
        }
    }
    Ok(Compiled {
        image,
        cached: false,
        path,
    })
}

/// Runs NVRTC on `src` with `opts` and returns the cubin, or the compiler's log as the error.
pub fn nvrtc_compile(src: &str, opts: &[String]) -> Result<Vec<u8>, CudaError> {
    nvrtc_run(src, opts).map(|(image, _)| image)
}

/// What ptxas reports for one kernel (`__global__` function) of a compile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelResources {
    /// The kernel's name.
    pub name: String,
    /// Registers a thread.
    pub registers: u32,
    /// Bytes a thread stores to local memory for want of registers.
    pub spill_stores: u32,
    /// Bytes it loads back from there.
    pub spill_loads: u32,
    /// Static shared memory a block.
    pub shared_bytes: u32,
    /// The first 16 hex digits of the SHA-256 of its machine code (the cubin's
    /// `.text.NAME` section), if found: equal before and after a change of the source, the
    /// kernel the GPU runs is the same.
    pub code_sha256: Option<String>,
}

/// The registers, spills, shared memory and code hash of every kernel of [`KERNELS`],
/// compiled for compute capability `cc` and hidden size `hidden` as [`compile`] compiles
/// them (no cache, no GPU). A spill in a kernel's inner loop can cost more than the change
/// that caused it saves; this shows it before a GPU runs the kernel. The hashes show whether
/// a reshaped source (helpers moved out, nothing computed differently) still compiles to the
/// code that was measured.
pub fn kernel_resources(cc: (i32, i32), hidden: usize) -> Result<Vec<KernelResources>, CudaError> {
    let mut opts = options(cc, hidden);
    opts.push("--ptxas-options=-v".into());
    let (image, log) = nvrtc_run(KERNELS, &opts)?;
    let mut kernels = parse_ptxas_report(&log);
    for k in &mut kernels {
        k.code_sha256 =
            elf_section(&image, &format!(".text.{}", k.name)).map(|code| hex(&sha256(code)[..8]));
    }
    Ok(kernels)
}

/// The bytes of the section `name` of a little-endian ELF64 image (a cubin), if it has one.
fn elf_section<'a>(elf: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| {
        let v = u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?);
        usize::try_from(v).ok()
    };
    if elf.get(..5)? != b"\x7fELF\x02" {
        return None;
    }
    let (shoff, entsize) = (u64_at(0x28)?, usize::from(u16_at(0x3a)?));
    let (count, names) = (usize::from(u16_at(0x3c)?), usize::from(u16_at(0x3e)?));
    // A section header: name offset at 0, file offset at 0x18, size at 0x20.
    let header = |i: usize| shoff.checked_add(i.checked_mul(entsize)?);
    let strings = u64_at(header(names)? + 0x18)?;
    (0..count).find_map(|i| {
        let h = header(i)?;
        let at = strings.checked_add(usize::try_from(u32_at(h)?).ok()?)?;
        let rest = elf.get(at..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        if &rest[..end] != name.as_bytes() {
            return None;
        }
        let (off, size) = (u64_at(h + 0x18)?, u64_at(h + 0x20)?);
        elf.get(off..off.checked_add(size)?)
    })
}

/// The kernels in ptxas's verbose report. Its lines for a kernel follow
/// `Compiling entry function 'NAME'`; a non-inlined device function has its own
/// `Function properties for NAME` lines, which belong to no kernel.
fn parse_ptxas_report(log: &str) -> Vec<KernelResources> {
    fn quoted(line: &str) -> Option<&str> {
        line.split('\'').nth(1)
    }
    fn number_before(line: &str, unit: &str) -> Option<u32> {
        let at = line.find(unit)?;
        line[..at].split_whitespace().last()?.parse().ok()
    }
    let mut kernels: Vec<KernelResources> = Vec::new();
    let mut current = false;
    for line in log.lines() {
        if line.contains("Compiling entry function") {
            kernels.push(KernelResources {
                name: quoted(line).unwrap_or_default().to_string(),
                ..KernelResources::default()
            });
            current = true;
        } else if let Some((_, name)) = line.split_once("Function properties for") {
            current = kernels.last().is_some_and(|k| k.name == name.trim());
        } else if let (true, Some(k)) = (current, kernels.last_mut()) {
            if let Some(n) = number_before(line, "bytes spill stores") {
                k.spill_stores = n;
            }
            if let Some(n) = number_before(line, "bytes spill loads") {
                k.spill_loads = n;
            }
            if line.contains("Used ") {
                k.registers = number_before(line, "registers").unwrap_or(0);
                k.shared_bytes = number_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    kernels
}

/// Runs NVRTC on `src` with `opts`: the cubin and the compiler's log, or the log as the error.
fn nvrtc_run(src: &str, opts: &[String]) -> Result<(Vec<u8>, String), CudaError> {
    let src = CString::new(src).map_err(|_| CudaError::Compile("NUL in the source".into()))?;
    let name = CString::new("laya_kernels.cu").map_err(|_| CudaError::Compile("name".into()))?;
    let copts: Vec<CString> = opts
        .iter()
        .map(|o| CString::new(o.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| CudaError::Compile("NUL in an option".into()))?;
    let ptrs: Vec<*const c_char> = copts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: nvrtc::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: valid C strings that outlive the calls; `prog` is destroyed on every path.
    unsafe {
        nvrtc_check(
            nvrtc::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            ),
            "nvrtcCreateProgram",
        )?;
        let compiled = nvrtc::nvrtcCompileProgram(prog, ptrs.len() as i32, ptrs.as_ptr());
        let result = if compiled != nvrtc::nvrtcResult::NVRTC_SUCCESS {
            Err(CudaError::Compile(format!(
                "NVRTC failed ({compiled:?}):\n{}",
                program_log(prog)
            )))
        } else {
            let mut size = 0usize;
            nvrtc_check(
                nvrtc::nvrtcGetCUBINSize(prog, &mut size),
                "nvrtcGetCUBINSize",
            )
            .and_then(|_| {
                let mut image = vec![0u8; size];
                nvrtc_check(
                    nvrtc::nvrtcGetCUBIN(prog, image.as_mut_ptr() as *mut c_char),
                    "nvrtcGetCUBIN",
                )
                .map(|_| (image, program_log(prog)))
            })
        };
        nvrtc::nvrtcDestroyProgram(&mut prog);
        result
    }
}

/// The compiler's log of `prog`.
unsafe fn program_log(prog: nvrtc::nvrtcProgram) -> String {
    let mut size = 0usize;
    if nvrtc::nvrtcGetProgramLogSize(prog, &mut size) != nvrtc::nvrtcResult::NVRTC_SUCCESS
        || size == 0
    {
        return String::new();
    }
    let mut buf = vec![0 as c_char; size];
    if nvrtc::nvrtcGetProgramLog(prog, buf.as_mut_ptr()) != nvrtc::nvrtcResult::NVRTC_SUCCESS {
        return String::new();
    }
    CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_report_is_read_per_kernel() {
        // The shape of ptxas's verbose report, a non-inlined device function included.
        let log = "\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
ptxas         .     16 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Compiling entry function 'attention_mma' for 'sm_90'
ptxas info    : Function properties for attention_mma
ptxas         .     8 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 127 registers, used 1 barriers, 8 bytes cumulative stack size, 46080 bytes smem
ptxas info    : Compile time = 71.490 ms
ptxas info    : Function properties for helper2
ptxas         .     0 bytes stack frame, 40 bytes spill stores, 40 bytes spill loads
ptxas info    : Compiling entry function 'geglu' for 'sm_90'
ptxas info    : Function properties for geglu
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
";
        let k = parse_ptxas_report(log);
        assert_eq!(
            k,
            vec![
                KernelResources {
                    name: "attention_mma".into(),
                    registers: 127,
                    spill_stores: 8,
                    spill_loads: 12,
                    shared_bytes: 46080,
                    code_sha256: None,
                },
                KernelResources {
                    name: "geglu".into(),
                    registers: 32,
                    ..KernelResources::default()
                },
            ]
        );
    }
}

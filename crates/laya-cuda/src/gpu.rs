//! The GPU underneath the engine: finding the CUDA libraries at run time, the context and
//! stream, device and pinned host memory, kernel launches and CUDA graphs. Thin RAII wrappers
//! over the driver API (through cudarc's raw bindings), so the engine holds plain device
//! pointers that stay fixed for the graphs that capture them.

use std::ffi::{c_void, CString};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{result, sys, CudaContext};

use crate::error::CudaError;

fn drv(what: &'static str) -> impl FnOnce(result::DriverError) -> CudaError {
    move |source| CudaError::Driver { what, source }
}

/// The shared libraries this engine opens, by the names cudarc looks for.
const LIBRARIES: [(&str, &str); 3] = [
    ("cuda", "libcuda.so.1"),
    ("nvrtc", "libnvrtc.so.13"),
    ("cublasLt", "libcublasLt.so.13"),
];

/// Directories searched for NVRTC and cuBLASLt when the dynamic loader's own search path
/// (`LD_LIBRARY_PATH`, the system's) does not have them: the CUDA toolkit's usual homes.
fn library_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in ["LAYA_CUDA_LIB_DIR", "CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var) {
            let p = PathBuf::from(v);
            dirs.push(p.join("lib64"));
            dirs.push(p.join("lib"));
            dirs.push(p);
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    dirs.push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
    dirs
}

/// Libraries opened by absolute path stay loaded for the process's life; once loaded, the
/// dynamic loader resolves cudarc's open by soname to them.
static PRELOADED: OnceLock<Vec<libloading::Library>> = OnceLock::new();

/// The file names cudarc 0.17 tries for library `name`, in its order (its
/// `get_lib_name_candidates` for CUDA 13.0 on Linux, which is not public).
fn candidates(name: &str) -> Vec<String> {
    let (major, minor) = (13, 0);
    vec![
        format!("lib{name}.so"),
        format!("lib{name}64.so"),
        format!("lib{name}64_{major}.so"),
        format!("lib{name}64_{major}{minor}.so"),
        format!("lib{name}64_{major}{minor}_0.so"),
        format!("lib{name}64_{major}0_{minor}.so"),
        format!("lib{name}64_10.so"),
        format!("lib{name}64_{major}0_0.so"),
        format!("lib{name}64_9.so"),
        format!("lib{name}.so.{major}"),
        format!("lib{name}.so.11"),
        format!("lib{name}.so.10"),
        format!("lib{name}.so.1"),
    ]
}

/// Checks the library cudarc would open for `name` (the first candidate that loads) and
/// that it is CUDA 13 or newer, using only libloading. cudarc resolves every CUDA 13 symbol
/// with `expect` when it opens a library, so an older library (a CUDA 12 toolkit's
/// unversioned `libnvrtc.so` first on the path, a pre-580 driver) must be caught here, as an
/// error, before cudarc sees it.
fn check_version(name: &str) -> Result<(), String> {
    let names: Vec<String> = if name == "cuda" {
        candidates("cuda")
            .into_iter()
            .chain(candidates("nvcuda"))
            .collect()
    } else {
        candidates(name)
    };
    for file in names {
        // SAFETY: loading a CUDA library runs its initialisers, as cudarc's own open would.
        let Ok(lib) = (unsafe { libloading::Library::new(&file) }) else {
            continue;
        };
        // (version, minimum, as shown). SAFETY: each symbol is called with the signature of
        // its CUDA 13 header; a missing symbol is an error, not a call.
        let version: Option<(i64, i64, String)> = unsafe {
            match name {
                "cuda" => lib
                    .get::<unsafe extern "C" fn(*mut i32) -> i32>(b"cuDriverGetVersion\0")
                    .ok()
                    .and_then(|f| {
                        let mut v = 0;
                        (f(&mut v) == 0).then_some(i64::from(v))
                    })
                    .map(|v| (v, 13_000, format!("{}.{}", v / 1000, v % 1000 / 10))),
                "nvrtc" => lib
                    .get::<unsafe extern "C" fn(*mut i32, *mut i32) -> i32>(b"nvrtcVersion\0")
                    .ok()
                    .and_then(|f| {
                        let (mut major, mut minor) = (0, 0);
                        (f(&mut major, &mut minor) == 0).then(|| {
                            (
                                i64::from(major) * 1000 + i64::from(minor) * 10,
                                13_000,
                                format!("{major}.{minor}"),
                            )
                        })
                    }),
                _ => lib
                    .get::<unsafe extern "C" fn() -> usize>(b"cublasLtGetVersion\0")
                    .ok()
                    .map(|f| f() as i64)
                    .map(|v| (v, 130_000, format!("{}.{}", v / 10_000, v % 10_000 / 100))),
            }
        };
        return match version {
            Some((v, min, _)) if v >= min => Ok(()),
            Some((_, _, shown)) => Err(format!("{file} is version {shown}; CUDA 13 is needed")),
            None => Err(format!("{file} does not report its version")),
        };
    }
    Err(format!("no {name} library is on the loader's path"))
}

/// Opens the named libraries (`cuda`, `nvrtc`, `cublasLt`) for cudarc, or says what is
/// missing or too old. Never panics: each is checked with libloading before cudarc opens it.
pub fn load(names: &[&str]) -> Result<(), CudaError> {
    PRELOADED.get_or_init(|| {
        let mut libs = Vec::new();
        for (name, soname) in LIBRARIES {
            if check_version(name).is_ok() {
                continue;
            }
            for dir in library_dirs() {
                let path = dir.join(soname);
                if path.is_file() {
                    // SAFETY: loading a CUDA library runs its initialisers, which is what
                    // cudarc would do by soname.
                    if let Ok(lib) = unsafe { libloading::Library::new(&path) } {
                        tracing::debug!(path = %path.display(), "preloaded");
                        libs.push(lib);
                        break;
                    }
                }
            }
        }
        libs
    });
    let problems: Vec<String> = names
        .iter()
        .filter_map(|name| check_version(name).err())
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CudaError::Unavailable(format!(
            "{} (set LD_LIBRARY_PATH or LAYA_CUDA_LIB_DIR to the CUDA 13 libraries)",
            problems.join("; ")
        )))
    }
}

/// Opens the driver, NVRTC and cuBLASLt (see [`load`]).
pub fn load_libraries() -> Result<(), CudaError> {
    load(&["cuda", "nvrtc", "cublasLt"])
}

/// A usable GPU, as the driver describes it before any context exists.
#[derive(Debug)]
pub struct FoundDevice {
    /// Device name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Compute capability.
    pub cc: (i32, i32),
}

/// How many CUDA devices the driver shows (after `CUDA_VISIBLE_DEVICES`), creating no context.
pub fn device_count() -> Result<usize, CudaError> {
    load_libraries()?;
    result::init().map_err(drv("cuInit"))?;
    let count = result::device::get_count().map_err(drv("cuDeviceGetCount"))?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// Checks that the libraries load and GPU `ordinal` exists with the instructions the kernels
/// use (compute capability 8.0 or newer), without creating a context: a probe that then
/// gave its context back would make the engine's own start create it a second time.
pub fn find_device(ordinal: usize) -> Result<FoundDevice, CudaError> {
    load_libraries()?;
    result::init().map_err(drv("cuInit"))?;
    let count = result::device::get_count().map_err(drv("cuDeviceGetCount"))?;
    let index = i32::try_from(ordinal)
        .ok()
        .filter(|&o| o < count)
        .ok_or_else(|| {
            CudaError::Unavailable(format!("no CUDA device {ordinal} ({count} present)"))
        })?;
    let dev = result::device::get(index).map_err(drv("cuDeviceGet"))?;
    let attr = |a| {
        // SAFETY: `dev` came from cuDeviceGet.
        unsafe { result::device::get_attribute(dev, a) }.map_err(drv("compute capability"))
    };
    let cc = (
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    );
    if cc.0 < 8 {
        return Err(CudaError::Unavailable(format!(
            "compute capability {}.{} is below the 8.0 these kernels need",
            cc.0, cc.1
        )));
    }
    let name = result::device::get_name(dev).map_err(drv("device name"))?;
    Ok(FoundDevice { name, cc })
}

/// One GPU: its context (bound to the thread that made it) and the engine's stream.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: sys::CUstream,
    /// Device name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Compute capability.
    pub cc: (i32, i32),
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("name", &self.name)
            .field("cc", &self.cc)
            .finish_non_exhaustive()
    }
}

impl Gpu {
    /// Opens GPU `ordinal`, checking that the libraries load and the chip has the
    /// instructions the kernels use (compute capability 8.0 or newer).
    pub fn open(ordinal: usize) -> Result<Gpu, CudaError> {
        let found = find_device(ordinal)?;
        let ctx = CudaContext::new(ordinal).map_err(drv("creating the context"))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(drv("cuStreamCreate"))?;
        Ok(Gpu {
            ctx,
            stream,
            name: found.name,
            cc: found.cc,
        })
    }

    /// Makes this GPU's context current on the calling thread.
    pub fn bind(&self) -> Result<(), CudaError> {
        self.ctx
            .bind_to_thread()
            .map_err(drv("binding the context"))
    }

    /// The engine's stream.
    pub fn stream(&self) -> sys::CUstream {
        self.stream
    }

    /// Waits for all work on the device, every stream (the synchronous copies that upload the
    /// weights included: they may still be in flight when `cuMemcpyHtoD` returns).
    pub fn sync_all(&self) -> Result<(), CudaError> {
        self.ctx.synchronize().map_err(drv("cuCtxSynchronize"))
    }

    /// Waits for everything queued on the stream.
    pub fn sync(&self) -> Result<(), CudaError> {
        sync_stream(self.stream)
    }
}

/// Waits for everything queued on `stream` (a live stream).
pub fn sync_stream(stream: sys::CUstream) -> Result<(), CudaError> {
    // SAFETY: the caller's stream is alive.
    unsafe { result::stream::synchronize(stream) }.map_err(drv("cuStreamSynchronize"))
}

impl Drop for Gpu {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: the stream was created by `open` and nothing uses it any more.
        unsafe {
            let _ = result::stream::synchronize(self.stream);
            let _ = result::stream::destroy(self.stream);
        }
    }
}

/// Device memory, freed on drop.
#[derive(Debug)]
pub struct DeviceBuf {
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl DeviceBuf {
    /// `bytes` of uninitialised device memory (at least one byte is allocated).
    pub fn alloc(bytes: usize) -> Result<DeviceBuf, CudaError> {
        // SAFETY: a plain allocation in the current context.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(drv("cuMemAlloc"))?;
        Ok(DeviceBuf { ptr, bytes })
    }

    /// A copy of `data` on the device.
    pub fn from_slice<T: Copy>(data: &[T]) -> Result<DeviceBuf, CudaError> {
        let buf = DeviceBuf::alloc(std::mem::size_of_val(data))?;
        if !data.is_empty() {
            // SAFETY: `buf` holds exactly `data`'s bytes.
            unsafe { result::memcpy_htod_sync(buf.ptr, data) }.map_err(drv("cuMemcpyHtoD"))?;
        }
        Ok(buf)
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The device address `offset` bytes in.
    pub fn at(&self, offset: usize) -> u64 {
        debug_assert!(offset <= self.bytes);
        self.ptr + offset as u64
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// A copy of the contents on the host; whatever writes them must have finished.
    pub fn to_host(&self) -> Result<Vec<u8>, CudaError> {
        let mut host = vec![0u8; self.bytes];
        // SAFETY: `host` has the buffer's size.
        unsafe { result::memcpy_dtoh_sync(&mut host, self.ptr) }.map_err(drv("cuMemcpyDtoH"))?;
        Ok(host)
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc` and not freed before.
        unsafe {
            let _ = result::free_sync(self.ptr);
        }
    }
}

/// Page-locked host memory, which copies to and from the GPU asynchronously and inside CUDA
/// graphs.
#[derive(Debug)]
pub struct PinnedBuf {
    ptr: *mut u8,
    bytes: usize,
}

impl PinnedBuf {
    /// `bytes` of zeroed pinned memory.
    pub fn alloc(bytes: usize) -> Result<PinnedBuf, CudaError> {
        // SAFETY: a plain allocation; zeroed below before any read.
        let ptr = unsafe { result::malloc_host(bytes.max(1), 0) }.map_err(drv("cuMemHostAlloc"))?
            as *mut u8;
        // SAFETY: `ptr` holds `bytes` bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes.max(1)) };
        Ok(PinnedBuf { ptr, bytes })
    }

    /// The memory as `i32`s (the engine's staging layout is 4-byte words).
    pub fn words_mut(&mut self) -> &mut [i32] {
        // SAFETY: the allocation is page-aligned and `bytes` long; `&mut self` makes it unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut i32, self.bytes / 4) }
    }

    /// The memory as `f32`s.
    pub fn floats(&self) -> &[f32] {
        // SAFETY: as `words_mut`.
        unsafe { std::slice::from_raw_parts(self.ptr as *const f32, self.bytes / 4) }
    }
}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc`.
        unsafe {
            let _ = result::free_host(self.ptr as *mut c_void);
        }
    }
}

/// The kernels of one compiled module.
#[derive(Debug)]
pub struct Module {
    module: sys::CUmodule,
}

impl Module {
    /// Loads a cubin image.
    pub fn load(image: &[u8]) -> Result<Module, CudaError> {
        // SAFETY: a cubin produced by NVRTC for this device.
        let module = unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
            .map_err(drv("cuModuleLoadData"))?;
        Ok(Module { module })
    }

    /// The kernel `name`.
    pub fn function(&self, name: &str) -> Result<sys::CUfunction, CudaError> {
        let cname = CString::new(name).map_err(|_| CudaError::Compile(format!("kernel {name}")))?;
        // SAFETY: the module is loaded.
        unsafe { result::module::get_function(self.module, cname) }
            .map_err(drv("cuModuleGetFunction"))
    }

    /// The kernel `name`, with the multiprocessor's on-chip memory split in favour of shared
    /// memory: a kernel whose blocks each take tens of kilobytes of it otherwise gets the
    /// driver's default split, which can hold fewer of its blocks at a time than its
    /// registers allow.
    pub fn function_max_shared(&self, name: &str) -> Result<sys::CUfunction, CudaError> {
        let f = self.function(name)?;
        // SAFETY: a kernel of this loaded module; 100 (%) is the largest carveout.
        unsafe {
            result::function::set_function_attribute(
                f,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                100,
            )
        }
        .map_err(drv("cuFuncSetAttribute"))?;
        Ok(f)
    }

    /// The kernel `name`, allowed `bytes` of dynamic shared memory a block (past the 48 KB a
    /// launch gets without asking), with the on-chip memory split as in
    /// [`Module::function_max_shared`].
    pub fn function_dynamic_shared(
        &self,
        name: &str,
        bytes: usize,
    ) -> Result<sys::CUfunction, CudaError> {
        let f = self.function_max_shared(name)?;
        let bytes = i32::try_from(bytes).map_err(|_| {
            CudaError::Unavailable(format!("{name}: {bytes} bytes of shared memory"))
        })?;
        // SAFETY: a kernel of this loaded module; the driver checks the size against the device.
        unsafe {
            result::function::set_function_attribute(
                f,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes,
            )
        }
        .map_err(drv("cuFuncSetAttribute"))?;
        Ok(f)
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: loaded by `load`.
        unsafe {
            let _ = result::module::unload(self.module);
        }
    }
}

/// The current context's GPU's multiprocessors.
pub fn multiprocessors() -> Result<u32, CudaError> {
    let mut dev: sys::CUdevice = 0;
    // SAFETY: an out-parameter; the engine's context is current on this thread.
    unsafe { sys::cuCtxGetDevice(&mut dev).result() }.map_err(drv("cuCtxGetDevice"))?;
    // SAFETY: `dev` came from the driver.
    let n = unsafe {
        result::device::get_attribute(
            dev,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )
    }
    .map_err(drv("multiprocessor count"))?;
    Ok(n.max(1) as u32)
}

/// How many blocks of `f` (of `threads` threads and `shared` bytes of dynamic shared memory)
/// one multiprocessor holds at once.
pub fn blocks_per_multiprocessor(
    f: sys::CUfunction,
    threads: u32,
    shared: usize,
) -> Result<u32, CudaError> {
    let mut n = 0;
    // SAFETY: a loaded kernel and an out-parameter.
    unsafe {
        sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut n, f, threads as i32, shared).result()
    }
    .map_err(drv("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
    Ok(n.max(1) as u32)
}

/// A TMA tensor map of a row-major f16 matrix, as `cp.async.bulk.tensor` reads it: boxes of
/// 64 columns (one 128-byte row each) × `box_rows` rows, landing in shared memory in the
/// 128-byte swizzle, rows past the matrix's end read as zeros.
#[derive(Clone, Copy)]
pub struct TensorMap(sys::CUtensorMap);

impl TensorMap {
    /// The map of the `rows` × `cols` matrix of halves at `ptr` (16-byte aligned, `cols` a
    /// multiple of 8).
    pub fn f16_rows(
        ptr: u64,
        rows: usize,
        cols: usize,
        box_rows: u32,
    ) -> Result<TensorMap, CudaError> {
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        let dims = [cols as u64, rows as u64];
        // The stride of every dimension past the first, in bytes.
        let strides = [cols as u64 * 2];
        let boxes = [64u32, box_rows];
        let steps = [1u32, 1];
        // SAFETY: every array has the rank's length (2; strides 1); the driver checks the
        // values, and only encodes: nothing is read from `ptr` here.
        unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                2,
                ptr as *mut c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                steps.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
            .result()
        }
        .map_err(drv("cuTensorMapEncodeTiled"))?;
        Ok(TensorMap(map))
    }
}

/// One kernel parameter: an 8-byte slot (the driver reads each parameter's own size from its
/// address: little-endian, so the low bytes), or a tensor map passed by value.
enum Param {
    Word(u64),
    Map(Box<sys::CUtensorMap>),
}

/// The arguments of one kernel launch.
#[derive(Default)]
pub struct Args {
    params: Vec<Param>,
}

impl Args {
    pub fn new() -> Args {
        Args {
            params: Vec::with_capacity(20),
        }
    }
    fn word(mut self, v: u64) -> Args {
        self.params.push(Param::Word(v));
        self
    }
    /// A device pointer (0 is a null pointer).
    pub fn ptr(self, p: u64) -> Args {
        self.word(p)
    }
    pub fn i32(self, v: i32) -> Args {
        self.word(v as u32 as u64)
    }
    pub fn i64(self, v: i64) -> Args {
        self.word(v as u64)
    }
    pub fn f32(self, v: f32) -> Args {
        self.word(v.to_bits() as u64)
    }
    /// A tensor map (a `__grid_constant__` parameter).
    pub fn map(mut self, m: &TensorMap) -> Args {
        self.params.push(Param::Map(Box::new(m.0)));
        self
    }

    fn pointers(&mut self) -> Vec<*mut c_void> {
        self.params
            .iter_mut()
            .map(|p| match p {
                Param::Word(w) => w as *mut u64 as *mut c_void,
                Param::Map(m) => &mut **m as *mut sys::CUtensorMap as *mut c_void,
            })
            .collect()
    }

    /// Launches `f` on `stream`.
    pub fn launch(
        mut self,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: u32,
        shared: u32,
        stream: sys::CUstream,
    ) -> Result<(), CudaError> {
        let mut params = self.pointers();
        // SAFETY: the caller passes the kernel's exact parameter list; the slots outlive the
        // call, which copies them.
        unsafe { result::launch_kernel(f, grid, (block, 1, 1), shared, stream, &mut params) }
            .map_err(drv("cuLaunchKernel"))
    }

    /// Launches `f` on `stream` as a programmatic dependent of the work queued before it: it
    /// may start once every block of the kernel before has signalled (`pdl_release` in
    /// kernels.cu) and must itself wait (`pdl_wait`) before it reads what that kernel wrote.
    pub fn launch_dependent(
        mut self,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: u32,
        shared: u32,
        stream: sys::CUstream,
    ) -> Result<(), CudaError> {
        let mut params = self.pointers();
        // SAFETY: a zeroed attribute value is a valid union; the one field set is the one the
        // attribute's id names.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: shared,
            hStream: stream,
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: as `launch`; `config` and `attr` outlive the call.
        unsafe {
            sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut()).result()
        }
        .map_err(drv("cuLaunchKernelEx"))
    }
}

/// An instantiated CUDA graph.
#[derive(Debug)]
pub struct Graph {
    exec: sys::CUgraphExec,
    graph: sys::CUgraph,
}

impl Graph {
    /// Starts capturing the work queued on `stream` (this thread's work only).
    pub fn begin(stream: sys::CUstream) -> Result<(), CudaError> {
        // SAFETY: a live stream.
        unsafe {
            result::stream::begin_capture(
                stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }
        .map_err(drv("cuStreamBeginCapture"))
    }

    /// Ends the capture and instantiates it.
    pub fn end(stream: sys::CUstream) -> Result<Graph, CudaError> {
        // SAFETY: a stream in capture mode.
        let graph =
            unsafe { result::stream::end_capture(stream) }.map_err(drv("cuStreamEndCapture"))?;
        // SAFETY: a graph just captured.
        let exec = unsafe {
            result::graph::instantiate(
                graph,
                sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
            )
        };
        match exec {
            Ok(exec) => Ok(Graph { exec, graph }),
            Err(e) => {
                // SAFETY: not instantiated, so only the graph exists.
                unsafe {
                    let _ = result::graph::destroy(graph);
                }
                Err(CudaError::Driver {
                    what: "cuGraphInstantiate",
                    source: e,
                })
            }
        }
    }

    /// Aborts a capture after a failure, so the stream is usable again.
    pub fn abandon(stream: sys::CUstream) {
        // SAFETY: ends whatever capture is open; the result is discarded.
        unsafe {
            if let Ok(g) = result::stream::end_capture(stream) {
                if !g.is_null() {
                    let _ = result::graph::destroy(g);
                }
            }
        }
    }

    /// Queues one replay on `stream`.
    pub fn launch(&self, stream: sys::CUstream) -> Result<(), CudaError> {
        // SAFETY: an instantiated graph whose buffers the engine keeps alive.
        unsafe { result::graph::launch(self.exec, stream) }.map_err(drv("cuGraphLaunch"))
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: created by `end`.
        unsafe {
            let _ = result::graph::exec_destroy(self.exec);
            let _ = result::graph::destroy(self.graph);
        }
    }
}

/// Queues a host-to-device copy of `bytes` from pinned memory.
pub fn copy_in(
    dst: u64,
    src: &PinnedBuf,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<(), CudaError> {
    debug_assert!(bytes <= src.bytes);
    // SAFETY: pinned source of at least `bytes`; the destination is the engine's buffer.
    unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.ptr as *const c_void, bytes, stream) }
        .result()
        .map_err(drv("cuMemcpyHtoDAsync"))
}

/// Queues a device-to-host copy of `bytes` into pinned memory.
pub fn copy_out(
    dst: &PinnedBuf,
    src: u64,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<(), CudaError> {
    debug_assert!(bytes <= dst.bytes);
    // SAFETY: pinned destination of at least `bytes`.
    unsafe { sys::cuMemcpyDtoHAsync_v2(dst.ptr as *mut c_void, src, bytes, stream) }
        .result()
        .map_err(drv("cuMemcpyDtoHAsync"))
}

/// Queues filling `words` 4-byte words at `dst` with `value`.
pub fn fill(dst: u64, value: u32, words: usize, stream: sys::CUstream) -> Result<(), CudaError> {
    // SAFETY: the caller's buffer holds at least `words` words.
    unsafe { sys::cuMemsetD32Async(dst, value, words, stream) }
        .result()
        .map_err(drv("cuMemsetD32Async"))
}

/// A CUDA event that records timing.
#[derive(Debug)]
pub struct Event {
    event: sys::CUevent,
}

impl Event {
    pub fn new() -> Result<Event, CudaError> {
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(drv("cuEventCreate"))?;
        Ok(Event { event })
    }

    /// Records the event on `stream` (inside a capture, as a graph node).
    pub fn record(&self, stream: sys::CUstream) -> Result<(), CudaError> {
        // SAFETY: a live event and stream.
        unsafe { result::event::record(self.event, stream) }.map_err(drv("cuEventRecord"))
    }

    /// Milliseconds from `self` to `end`, both completed.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32, CudaError> {
        // SAFETY: live events.
        unsafe { result::event::elapsed(self.event, end.event) }.map_err(drv("cuEventElapsedTime"))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by `new`.
        unsafe {
            let _ = result::event::destroy(self.event);
        }
    }
}

// Lets this package's binaries, tests and examples find the prebuilt libmlx at run time without
// LD_LIBRARY_PATH. The link args of mlx-sys's build script do not reach its dependents'
// binaries, so mlx-sys publishes the MLX it linked as `DEP_MLX_*`, which a build script sees
// only with a direct mlx-sys dependency. crates/sys1rust/build.rs includes this file.
// (Plain comments: an included file cannot hold inner doc comments.)

fn main() {
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    println!("cargo:rerun-if-env-changed=MLX_RPATH");
    // A release bundle names a directory relative to the binary, e.g. '$ORIGIN/../lib/mlx/lib'
    // (Linux) or '@executable_path/../lib/mlx/lib' (macOS); a source build uses the wheel's.
    if let Some(dir) = var("MLX_RPATH").or_else(|| var("DEP_MLX_LIBDIR")) {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    // Which GPU backend the linked libmlx has (cpu, cuda or metal), for the device name the
    // server reports.
    println!(
        "cargo:rustc-env=LAYA_MLX_BACKEND={}",
        var("DEP_MLX_BACKEND").unwrap_or_else(|| "cpu".into())
    );
    if var("CARGO_CFG_TARGET_OS").as_deref() != Some("linux") {
        return;
    }
    // The libmlx of a CUDA wheel needs libraries the build host need not have (the CUDA
    // libraries of pip's nvidia-* wheels, the driver's libcuda.so.1); on the GPU host, libmlx's
    // own RPATH finds them. GNU ld refuses such a link without this flag.
    if var("DEP_MLX_BACKEND").as_deref() == Some("cuda") {
        println!("cargo:rustc-link-arg=-Wl,--allow-shlib-undefined");
    }
    // A direct DT_NEEDED on a faster BLAS (libopenblas.so.0) comes first in the loader's
    // breadth-first search, so MLX's BLAS and LAPACK calls bind to it rather than to the netlib
    // build the mlx-cpu wheel bundles: about 40x faster sgemm. (`-l dylib:+as-needed` would say
    // this more simply but is nightly-only.)
    if let Some(blas) = var("DEP_MLX_BLAS_DYLIB") {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-l:{blas},--as-needed");
    }
}

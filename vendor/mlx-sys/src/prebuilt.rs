//! Build mlx-c against the prebuilt MLX of a PyPI wheel (`mlx-cpu`, `mlx-cuda-13`, `mlx-metal`)
//! instead of building MLX from GitHub. `build.rs` takes this path when `MLX_SYS_PREBUILT_DIR`
//! names the wheel's `mlx` directory (`lib/`, `include/`, `share/cmake/MLX/`). Added by the
//! vendoring project; see VENDORED.md.

use cmake::Config;
use std::{
    env, fs,
    path::{Path, PathBuf},
};

/// The MLX backend a wheel was built for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    Cpu,
    Cuda,
    Metal,
}

impl Backend {
    /// Reads the backend from the wheel's configured `MLXConfig.cmake`: CMake substituted its
    /// build options into the text, so a CUDA build reads `if(ON)` before
    /// `find_dependency(CUDAToolkit ...)` and a Metal build reads `set(MLX_BUILD_METAL ON)`.
    fn detect(mlx_config: &str) -> Self {
        let lines: Vec<&str> = mlx_config.lines().map(str::trim).collect();
        let cuda = lines.windows(2).any(|pair| {
            pair[0].replace(' ', "") == "if(ON)"
                && pair[1].starts_with("find_dependency(CUDAToolkit")
        });
        if cuda {
            Backend::Cuda
        } else if lines.contains(&"set(MLX_BUILD_METAL ON)") {
            Backend::Metal
        } else {
            Backend::Cpu
        }
    }

    fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
            Backend::Metal => "metal",
        }
    }
}

/// Compiles mlx-c as a static library against the wheel's headers, links it and the wheel's
/// `libmlx` dynamically, and publishes the wheel's location to dependents as `DEP_MLX_*`.
pub fn build_and_link(prefix: &Path, mlx_c_root: &Path, pinned_version: Option<&str>) {
    assert!(
        prefix.is_absolute(),
        "MLX_SYS_PREBUILT_DIR must be an absolute path, got {}",
        prefix.display()
    );
    let apple = env::var("CARGO_CFG_TARGET_VENDOR").as_deref() == Ok("apple");
    let linux = env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    let lib_dir = prefix.join("lib");
    let include_dir = prefix.join("include");
    let cmake_dir = prefix.join("share/cmake/MLX");
    let dylib = lib_dir.join(if apple { "libmlx.dylib" } else { "libmlx.so" });
    for path in [
        &dylib,
        &include_dir.join("mlx/mlx.h"),
        &cmake_dir.join("MLXConfig.cmake"),
    ] {
        assert!(
            path.is_file(),
            "MLX_SYS_PREBUILT_DIR={} is not the `mlx` directory of an unpacked MLX wheel: {} is missing",
            prefix.display(),
            path.display()
        );
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let version_file = cmake_dir.join("MLXConfigVersion.cmake");
    println!("cargo:rerun-if-changed={}", version_file.display());

    let mlx_config = fs::read_to_string(cmake_dir.join("MLXConfig.cmake"))
        .expect("Unable to read the wheel's MLXConfig.cmake");
    let backend = Backend::detect(&mlx_config);
    let version = fs::read_to_string(&version_file)
        .ok()
        .and_then(|text| package_version(&text));
    // mlx-c calls MLX's C++ API, so it only works against the MLX release it pins.
    if let (Some(found), Some(pinned)) = (version.as_deref(), pinned_version) {
        if found != pinned {
            println!(
                "cargo:warning=MLX_SYS_PREBUILT_DIR holds MLX {found}, but this mlx-c pins v{pinned}; \
                 use the {pinned} wheel"
            );
        }
    }

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let mut config = Config::new(mlx_c_root);
    // A build tree of its own: the GitHub path's CMake cache (no MLX_C_USE_SYSTEM_MLX) and this
    // one's must not leak into each other when MLX_SYS_PREBUILT_DIR is set or unset.
    config.out_dir(out_dir.join("prebuilt"));
    // mlx-c is small and sits between Rust and MLX on every call: always build it optimized.
    config.profile("Release");
    config.define("MLX_C_USE_SYSTEM_MLX", "ON");
    config.define("MLX_C_BUILD_EXAMPLES", "OFF");
    config.define("BUILD_SHARED_LIBS", "OFF");
    config.define("CMAKE_POSITION_INDEPENDENT_CODE", "ON");
    // Only the static library: nothing here uses an installed mlx-c (headers, CMake package).
    config.build_target("mlxc");

    // The wheel's MLXConfig.cmake of a CUDA build calls find_dependency(CUDAToolkit), which
    // needs nvcc. mlx-c is static, so CMake never links libmlx and only needs its headers:
    // give find_package(MLX) a config that declares just that.
    let header_only = backend == Backend::Cuda || env::var_os("MLX_SYS_CMAKE_SHIM").is_some();
    let mlx_dir = if header_only {
        header_only_cmake_config(&out_dir, &include_dir)
    } else {
        cmake_dir
    };
    config.define("MLX_DIR", &mlx_dir);

    if apple {
        // As the GitHub path does: Xcode's clang matches the macOS SDK.
        config.define("CMAKE_C_COMPILER", "/usr/bin/cc");
        config.define("CMAKE_CXX_COMPILER", "/usr/bin/c++");
    }
    if linux {
        let shim = format_compat_header(&out_dir);
        config.cxxflag(format!("-include {}", shim.display()));
    }

    let dst = config.build();

    println!("cargo:rustc-link-search=native={}/build", dst.display());
    println!("cargo:rustc-link-lib=static=mlxc");
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=mlx");
    if apple {
        // The same system libraries the GitHub path links for a Metal + Accelerate build.
        println!("cargo:rustc-link-lib=c++");
        println!("cargo:rustc-link-lib=dylib=objc");
        println!("cargo:rustc-link-lib=framework=Foundation");
        println!("cargo:rustc-link-lib=framework=Metal");
        println!("cargo:rustc-link-lib=framework=Accelerate");
    } else {
        println!("cargo:rustc-link-lib=dylib=stdc++");
    }
    // This reaches only mlx-sys's own examples and tests: Cargo does not pass a dependency's
    // link args on. Dependents use DEP_MLX_LIBDIR in their own build script.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());

    publish(prefix, mlx_c_root, backend, version.as_deref(), linux);
}

/// Dependents read these as `DEP_MLX_*`; VENDORED.md documents them.
fn publish(prefix: &Path, mlx_c_root: &Path, backend: Backend, version: Option<&str>, linux: bool) {
    let include = prefix.join("include");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let mut includes = vec![include.clone(), manifest.join(mlx_c_root)];
    let mut defines = "";
    if backend == Backend::Metal {
        includes.insert(0, include.join("metal_cpp"));
        defines = "ACCELERATE_NEW_LAPACK _METAL_";
    }
    let includes = env::join_paths(includes)
        .expect("MLX include directories must not contain the path-list separator");
    println!("cargo::metadata=prefix={}", prefix.display());
    println!("cargo::metadata=libdir={}", prefix.join("lib").display());
    println!("cargo::metadata=include={}", includes.display());
    println!("cargo::metadata=defines={defines}");
    println!("cargo::metadata=backend={}", backend.name());
    if let Some(version) = version {
        println!("cargo::metadata=version={version}");
    }
    // A faster BLAS to bind ahead of the netlib BLAS that the mlx-cpu wheel bundles. Only the
    // Linux CPU backend uses it: CUDA does its matmuls on the GPU (and its host need not have
    // OpenBLAS), Metal uses Accelerate. An empty value turns it off.
    println!("cargo:rerun-if-env-changed=MLX_SYS_BLAS_DYLIB");
    let blas = env::var("MLX_SYS_BLAS_DYLIB").unwrap_or_default();
    if !blas.is_empty() && linux && backend == Backend::Cpu {
        println!("cargo::metadata=blas_dylib={blas}");
    }
}

/// `set(PACKAGE_VERSION "0.32.2")` in a CMake package version file.
fn package_version(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("set(PACKAGE_VERSION ")?;
        Some(rest.trim_end_matches(')').trim_matches('"').to_owned())
    })
}

/// Writes a `MLXConfig.cmake` that declares the target `mlx` with the wheel's headers only, and
/// returns its directory.
fn header_only_cmake_config(out_dir: &Path, include_dir: &Path) -> PathBuf {
    let dir = out_dir.join("mlx-cmake-shim");
    let include = include_dir.display();
    let text = format!(
        "# Written by mlx-sys's build.rs: MLX's headers only, for a static mlx-c.\n\
         if(NOT TARGET mlx)\n  add_library(mlx INTERFACE IMPORTED)\n  \
         set_target_properties(mlx PROPERTIES INTERFACE_INCLUDE_DIRECTORIES \"{include}\")\n\
         endif()\n\
         set(MLX_INCLUDE_DIRS \"{include}\")\n\
         set(MLX_FOUND TRUE)\n"
    );
    write_if_changed(&dir.join("MLXConfig.cmake"), &text);
    dir
}

/// Writes the header force-included into mlx-c's C++ on Linux, and returns its path.
///
/// mlx-c's `mlx/c/private/io.h` calls `std::format`, which libstdc++ has only from GCC 13 on
/// (Debian 12 ships GCC 12). mlx-c cannot use clang + libc++ instead: libmlx is built against
/// libstdc++. The stand-in covers what mlx-c uses, `{}` placeholders, and disappears wherever
/// the real one exists.
fn format_compat_header(out_dir: &Path) -> PathBuf {
    const TEXT: &str = r#"// Written by mlx-sys's build.rs: std::format for libstdc++ < 13 ("{}" only).
#ifndef MLX_SYS_FORMAT_COMPAT_H
#define MLX_SYS_FORMAT_COMPAT_H
#include <version>
#ifndef __cpp_lib_format
#include <cstddef>
#include <sstream>
#include <string>
#include <string_view>
namespace std {
template <typename... Args>
string format(string_view fmt, const Args&... args) {
  ostringstream out;
  size_t pos = 0;
  auto put = [&](const auto& arg) {
    size_t open = fmt.find("{}", pos);
    if (open == string_view::npos) {
      return;
    }
    out << fmt.substr(pos, open - pos) << arg;
    pos = open + 2;
  };
  (put(args), ...);
  out << fmt.substr(pos);
  return out.str();
}
} // namespace std
#endif
#endif
"#;
    let path = out_dir.join("mlx_c_format_compat.h");
    write_if_changed(&path, TEXT);
    path
}

/// Rewriting an unchanged header would make CMake rebuild all of mlx-c (minutes) on every run
/// of this build script.
fn write_if_changed(path: &Path, text: &str) {
    if fs::read_to_string(path).is_ok_and(|old| old == text) {
        return;
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).expect("Unable to create a directory in OUT_DIR");
    }
    fs::write(path, text).expect("Unable to write a file in OUT_DIR");
}

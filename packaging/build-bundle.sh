#!/usr/bin/env bash
# Builds a relocatable release bundle of sys1rust for one platform:
#
#   <out>/sys1rust-<version>-<platform>.tar.gz   holding sys1rust-<version>-<platform>/
#     bin/sys1rust               RUNPATH $ORIGIN/../lib/mlx/lib (macOS: @executable_path/...)
#     lib/mlx/lib/               libmlx from the pinned MLX wheel (and mlx.metallib on macOS)
#     lib/mlx/include/           CUDA only: the headers NVRTC compiles MLX's JIT kernels with
#     lib/mlx_<flavor>.libs/     the libraries the wheel bundles beside libmlx (found through
#                                libmlx's own RPATH $ORIGIN/../../mlx_<flavor>.libs)
#     LICENSE, NOTICE            ours (NOTICE when the repository has one)
#     licenses/                  MLX (and the wheel's SBOM), mlx-c, mlx-sys
#     README.md                  what the bundle needs from the system, how to run it
#     VERSION                    the version
#   <out>/SHA256SUMS             sha256sum lines for this version's sys1rust-<version>-*.tar.gz
#                                in <out> (every platform built into it; never an older
#                                version's, which would make install.sh's "latest" ambiguous)
#   <out>/install.sh             the installer, to publish beside them
#
# Usage: packaging/build-bundle.sh PLATFORM [--out DIR] [--binary FILE]
#        packaging/build-bundle.sh --sums [--out DIR]
#   PLATFORM        linux-x86_64-cpu | linux-aarch64-cpu | linux-x86_64-cuda13 | macos-arm64
#                   (built on that host)
#   --out DIR       where the tarball goes (default: dist/)
#   --binary FILE   package this already built sys1rust instead of building one; its run-time
#                   search path is rewritten (patchelf on Linux, install_name_tool on macOS)
#                   and its debug info stripped. The tests use this to reuse their build.
#   --sums          build nothing: rewrite <out>/SHA256SUMS over this version's tarballs, e.g.
#                   in a dist/ merged from the platforms' hosts
#
# Without --binary it builds `cargo build --release -p sys1rust` into target/bundle-<platform>,
# a target directory of its own: the binary gets the bundle's relative rpath (MLX_RPATH) there,
# and the development build in target/release keeps the wheel's absolute one.
# The wheel comes from scripts/setup-mlx.sh. Progress goes to stderr; stdout gets the tarball's
# path. Running it again rebuilds the tarball and SHA256SUMS.
set -euo pipefail

say() { printf 'build-bundle: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

repo=$(cd "$(dirname "$0")/.." && pwd)
platform='' out=$repo/dist binary='' sums_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=${2:?--out needs a directory} && shift 2 ;;
    --binary) binary=${2:?--binary needs a file} && shift 2 ;;
    --sums) sums_only=1 && shift ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0" && exit 0 ;;
    -*) die "unknown option $1" ;;
    *)
      [ -z "$platform" ] || die "one platform at a time"
      platform=$1 && shift
      ;;
  esac
done

version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$repo/Cargo.toml")
[ -n "$version" ] || die "no version in the [workspace.package] of Cargo.toml"

# SHA256SUMS over this version's tarballs in $out, whichever platforms were built into it.
# Only this version's: install.sh takes the latest release's version from the one line its
# platform has there, and refuses a SHA256SUMS that lists several.
write_sums() {
  (
    cd "$out"
    tarballs=()
    # By name, not sys1rust-$version-*: that would take a pre-release such as $version-rc.1 too.
    for p in linux-x86_64-cpu linux-aarch64-cpu linux-x86_64-cuda13 macos-arm64; do
      if [ -f "sys1rust-$version-$p.tar.gz" ]; then tarballs+=("sys1rust-$version-$p.tar.gz"); fi
    done
    [ ${#tarballs[@]} -gt 0 ] || die "no sys1rust-$version-<platform>.tar.gz in $out"
    if command -v sha256sum >/dev/null; then sum=(sha256sum); else sum=(shasum -a 256); fi
    "${sum[@]}" "${tarballs[@]}" >SHA256SUMS.tmp
    mv -f SHA256SUMS.tmp SHA256SUMS
  )
}

if [ "$sums_only" = 1 ]; then
  [ -z "$platform$binary" ] || die "--sums builds nothing: it takes no platform or --binary"
  [ -d "$out" ] || die "no directory $out"
  out=$(cd "$out" && pwd)
  write_sums
  echo "$out/SHA256SUMS"
  exit 0
fi

host=$(uname -s)-$(uname -m)
case $platform in
  linux-x86_64-cpu) flavor=cpu want_host=Linux-x86_64 ;;
  linux-aarch64-cpu) flavor=cpu want_host=Linux-aarch64 ;;
  linux-x86_64-cuda13) flavor=cuda13 want_host=Linux-x86_64 ;;
  macos-arm64) flavor=metal want_host=Darwin-arm64 ;;
  '') die "usage: packaging/build-bundle.sh linux-x86_64-cpu|linux-aarch64-cpu|linux-x86_64-cuda13|macos-arm64 [--out DIR] [--binary FILE]" ;;
  *) die "unknown platform '$platform' (linux-x86_64-cpu, linux-aarch64-cpu, linux-x86_64-cuda13 or macos-arm64)" ;;
esac
arch=${want_host#*-}
# A Linux binary built elsewhere (a cross build) is packaged on any Linux host, with the wheel
# of the bundle's architecture and that architecture's binutils (Debian: binutils-aarch64-linux-gnu)
# for strip and objdump; patchelf and readelf read every architecture.
binutils=
case $host in
  "$want_host") ;;
  Linux-*)
    if [ -z "$binary" ] || [ "$flavor" != cpu ]; then
      die "$platform bundles are built on $want_host, this is $host (or pass a --binary built for it)"
    fi
    binutils=$arch-linux-gnu-
    command -v "${binutils}strip" >/dev/null ||
      die "${binutils}strip is needed to pack a $arch binary here (Debian: binutils-$arch-linux-gnu)"
    ;;
  *) die "$platform bundles are built on $want_host, this is $host" ;;
esac
if [ "$flavor" = metal ]; then
  rpath=@executable_path/../lib/mlx/lib
else
  # shellcheck disable=SC2016 # $ORIGIN is for the dynamic loader
  rpath='$ORIGIN/../lib/mlx/lib'
fi
# Bind Debian's OpenBLAS ahead of the wheel's netlib BLAS on the Linux CPU build (about 40x
# faster sgemm); the bundle's README and install.sh name libopenblas0-pthread as a requirement.
blas=
[ "$flavor" = cpu ] && blas=libopenblas.so.0

name=sys1rust-$version-$platform

mlx=$(MLX_ARCH=$arch "$repo/scripts/setup-mlx.sh" "$flavor") # the wheel's mlx/ directory
wheel=$(dirname "$mlx")

# 1. The binary: built here with the bundle's rpath, or given and rewritten.
built=0
if [ -z "$binary" ]; then
  built=1
  target=$repo/target/bundle-$platform
  say "building sys1rust $version for $platform in ${target#"$repo"/} (minutes on a fresh target dir)"
  (cd "$repo" && MLX_SYS_PREBUILT_DIR=$mlx MLX_RPATH=$rpath MLX_SYS_BLAS_DYLIB=$blas \
    CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=debuginfo \
    cargo build --release --locked --quiet -p sys1rust --target-dir "$target")
  binary=$target/release/sys1rust
fi
[ -x "$binary" ] || die "no executable $binary"

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d "$out/.stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/$name
mkdir -p "$root/bin" "$root/lib/mlx" "$root/licenses/mlx" "$root/licenses/mlx-c" "$root/licenses/mlx-sys"
cp "$binary" "$root/bin/sys1rust"
chmod 755 "$root/bin/sys1rust"
bin=$root/bin/sys1rust

if [ "$flavor" = metal ]; then
  if [ "$built" = 0 ]; then
    while read -r old; do
      install_name_tool -delete_rpath "$old" "$bin"
    done < <(otool -l "$bin" | awk '/cmd LC_RPATH/ { getline; getline; print $2 }')
    install_name_tool -add_rpath "$rpath" "$bin"
    strip -S "$bin"
    codesign --force --sign - "$bin" # install_name_tool invalidates the ad-hoc signature
  fi
  rpaths=$(otool -l "$bin" | awk '/cmd LC_RPATH/ { getline; getline; print $2 }')
  [ "$rpaths" = "$rpath" ] || die "the binary's rpaths are '$rpaths', not $rpath"
else
  if [ "$built" = 0 ]; then
    command -v patchelf >/dev/null || die "--binary needs patchelf (Debian: apt-get install patchelf)"
    patchelf --set-rpath "$rpath" "$bin"
    "${binutils}strip" --strip-debug "$bin"
  fi
  runpath=$(readelf -d "$bin" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  [ "$runpath" = "$rpath" ] || die "the binary's RUNPATH is '$runpath', not $rpath"
  if [ -n "$blas" ] && ! readelf -d "$bin" | grep -q "NEEDED.*\[$blas\]"; then
    die "the binary does not link $blas (was it built with MLX_SYS_BLAS_DYLIB=$blas?)"
  fi
fi

# 2. MLX, keeping the wheel's layout so that libmlx's own RPATH still finds its libraries.
cp -R "$mlx/lib" "$root/lib/mlx/lib"
if [ "$flavor" = cuda13 ]; then cp -R "$mlx/include" "$root/lib/mlx/include"; fi
for libs in "$wheel"/mlx_*.libs; do
  if [ -d "$libs" ]; then cp -R "$libs" "$root/lib/"; fi
done
dist_info=$(echo "$wheel"/mlx_*.dist-info)
[ -d "$dist_info" ] || die "no dist-info in $wheel"
cp "$dist_info/licenses/LICENSE" "$root/licenses/mlx/LICENSE"
if [ -d "$dist_info/sboms" ]; then cp "$dist_info/sboms/"* "$root/licenses/mlx/"; fi
cp "$repo/vendor/mlx-sys/src/mlx-c/LICENSE" "$root/licenses/mlx-c/LICENSE"
cp "$repo/vendor/mlx-sys/LICENSE-MIT" "$repo/vendor/mlx-sys/LICENSE-APACHE" "$root/licenses/mlx-sys/"
cp "$repo/LICENSE" "$root/LICENSE"
if [ -f "$repo/NOTICE" ]; then cp "$repo/NOTICE" "$root/NOTICE"; fi
echo "$version" >"$root/VERSION"
mlx_version=$(sed -n 's/^Version: //p' "$dist_info/METADATA")

# 3. The README: what the system must provide.
glibc=
if [ "$flavor" != metal ]; then
  # The newest glibc symbol version any shipped ELF file needs.
  command -v "${binutils}objdump" >/dev/null || die "${binutils}objdump (binutils) is needed"
  glibc=$(find "$root/bin" "$root/lib" -type f \( -name sys1rust -o -name '*.so*' \) -exec "${binutils}objdump" -T {} + 2>/dev/null |
    grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n | tail -n 1)
fi
cuda_pip="'nvidia-cudnn-cu13==9.*' nvidia-nccl-cu13 'nvidia-cublas==13.*' 'nvidia-cufft==12.*' 'nvidia-cuda-nvrtc==13.*' 'nvidia-cuda-runtime==13.*'"
case $flavor in
  cpu) requirements="- Linux $arch with glibc $glibc or newer.
- OpenBLAS as \`libopenblas.so.0\`: \`sudo apt-get install libopenblas0-pthread\` (Debian, Ubuntu),
  \`sudo dnf install openblas-pthreads\` (Fedora), \`sudo pacman -S openblas\` (Arch). The binary
  links it directly so that MLX's matrix products use it instead of the reference BLAS the MLX
  wheel bundles in \`lib/mlx_cpu.libs\`: about 40 times faster f32 matmul.
- Optional: \`g++\` on \`PATH\`. MLX's CPU backend compiles fused kernels with it at run time
  (cached in \`\$TMPDIR/mlx\`) and falls back to slower unfused ones without it." ;;
  cuda13) requirements="- Linux x86-64 with glibc $glibc or newer and an NVIDIA GPU with driver 580 or newer (CUDA 13).
- The CUDA 13 libraries MLX's \`mlx-cuda-13\` wheel requires, which this bundle does not ship:
  cuBLAS 13, cuFFT 12, NVRTC 13 with the CUDA 13 runtime headers, cuDNN 9 and NCCL 2. Either
  install them system-wide (the loader must find \`libcublasLt.so.13\`, \`libcufft.so.12\`,
  \`libnvrtc.so.13\`, \`libcudnn.so.9\`, \`libnccl.so.2\`; NVRTC finds the headers through
  \`CUDA_HOME\` or \`/usr/local/cuda\`), or let pip put them in \`lib/nvidia/\`, where
  \`libmlx\` looks first (its RPATH is \`\$ORIGIN/../../nvidia/*/lib\`). In an unpacked bundle:

      python3 -m pip install --target lib $cuda_pip

  An install made by \`install.sh\` has \`lib/nvidia\` linked to
  \`~/.local/share/sys1rust/cuda/nvidia\`, so that they survive updates:

      python3 -m pip install --target ~/.local/share/sys1rust/cuda $cuda_pip" ;;
  metal) requirements="- macOS 14 or newer on Apple silicon (arm64)." ;;
esac
notice=
if [ -f "$root/NOTICE" ]; then notice=", and \`NOTICE\` its third-party notices"; fi
cat >"$root/README.md" <<EOF
# sys1rust $version ($platform)

Serves Laya System 1 decision models over HTTP, on MLX $mlx_version. Source, documentation and
the installer: https://github.com/sys1rust/sys1rust

    bin/sys1rust serve --model DIR      # a local checkpoint directory, or a model name
    bin/sys1rust --help

The bundle runs from any directory: \`bin/sys1rust\` finds \`lib/mlx/lib\` relative to itself.
Keep the directory's layout as it is.

## Requirements

$requirements

## Contents

- \`bin/sys1rust\`: the server.
- \`lib/mlx/\`: MLX $mlx_version ($(basename "$dist_info" .dist-info) wheel from PyPI), MIT license
  (\`licenses/mlx\`), and beside it the libraries that wheel bundles.
- \`LICENSE\`: sys1rust's license$notice.
  \`licenses/\`: MLX (with the wheel's SBOM listing the libraries it bundles), mlx-c, mlx-sys.
EOF

# 4. The tarball (reproducible where GNU tar is available), then SHA256SUMS over this version's.
tarball=$out/$name.tar.gz
tar_flags=()
if tar --version 2>/dev/null | grep -q 'GNU tar'; then
  epoch=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)
  tar_flags=(--sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch")
fi
tar -C "$stage" "${tar_flags[@]}" -cf - "$name" | gzip -n -6 >"$tarball.tmp"
mv -f "$tarball.tmp" "$tarball"
write_sums
cp "$repo/install.sh" "$out/install.sh"
echo "$tarball"

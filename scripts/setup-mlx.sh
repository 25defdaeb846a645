#!/usr/bin/env bash
# Prepares what vendor/mlx-sys needs to link MLX from a prebuilt PyPI wheel:
#   1. on Debian/Ubuntu, the packages that build mlx-c and its bindings (cmake, make, g++, clang,
#      libclang-dev) and, for the CPU wheel, OpenBLAS (see .cargo/config.toml);
#   2. the pinned MLX wheel, fetched with pip and checked against its sha256;
#   3. the wheel unpacked into <repo>/.mlx/<flavor>/, keeping its layout: libmlx finds the
#      libraries it bundles through an RPATH into the sibling mlx_*.libs/ directory.
# It prints the directory to give mlx-sys as MLX_SYS_PREBUILT_DIR on stdout; progress goes to
# stderr, and a run that finds everything in place prints nothing else.
#
# Usage: scripts/setup-mlx.sh [cpu|cuda13|metal]   (or MLX_FLAVOR=...)
#   cpu     mlx-cpu, Linux x86-64 or aarch64 (the default there; .cargo/config.toml points at
#           it). MLX_ARCH=aarch64 on an x86-64 host fetches the Arm wheel into .mlx/cpu-aarch64
#           for a cross build instead.
#   cuda13  mlx-cuda-13, Linux x86-64 with a CUDA 13 driver; export the printed directory
#   metal   mlx-metal, macOS arm64 (the default there); export the printed directory
set -euo pipefail

mlx_version=0.32.2 # the MLX release mlx-c 0.7.0 (vendor/mlx-sys) pins

if [ "$(uname -s)-$(uname -m)" = Darwin-arm64 ]; then host_flavor=metal; else host_flavor=cpu; fi
flavor=${1:-${MLX_FLAVOR:-$host_flavor}}
host_arch=$(uname -m)
arch=${MLX_ARCH:-$host_arch}

# The wheel of each flavor, by exact file name, and its sha256 as PyPI publishes it. The
# platform tag is pinned, so every host fetches the same file (mlx-metal also has macOS 15 and
# 26 wheels; the macOS 14 one runs on all three).
case $flavor in
  cpu)
    package=mlx-cpu platform=manylinux_2_35_$arch
    wheel=mlx_cpu-$mlx_version-py3-none-$platform.whl
    case $arch in
      x86_64) sha256=fc5d31b90fc4f457b2f9614ed45651a567d22a6a11a03d114a90a4e10bdd8878 ;;
      aarch64) sha256=d0f94625588b51a878786dd51cec5617894ce586cf3c94645ce1b64e24c27c0b ;;
      *)
        echo "setup-mlx: mlx-cpu has Linux wheels for x86_64 and aarch64, not '$arch'" >&2
        exit 2
        ;;
    esac
    ;;
  cuda13)
    package=mlx-cuda-13 platform=manylinux_2_35_x86_64
    wheel=mlx_cuda_13-$mlx_version-py3-none-$platform.whl
    sha256=335094ccd1c0c6dc3e09c8caba207c8180602bacc0c38ba20c1d81e9456ab394
    ;;
  metal)
    package=mlx-metal platform=macosx_14_0_arm64
    wheel=mlx_metal-$mlx_version-py3-none-$platform.whl
    sha256=3825fff379dbc107dd3413e564a06caeaa24819910ec49c0439e454c06a1b9b8
    ;;
  *)
    echo "setup-mlx: unknown flavor '$flavor' (expected cpu, cuda13 or metal)" >&2
    exit 2
    ;;
esac

repo=$(cd "$(dirname "$0")/.." && pwd)
dest=$repo/.mlx/$flavor
[ "$arch" = "$host_arch" ] || dest=$dest-$arch
wheels=$repo/.mlx/wheels

say() { printf 'setup-mlx: %s\n' "$*" >&2; }

# 1. System packages (Debian/Ubuntu). dpkg-query keeps a re-run fast and quiet.
install_debian_packages() {
  local wanted=(cmake make g++ clang libclang-dev) missing=() pkg
  [ "$flavor" = cpu ] && wanted+=(libopenblas0-pthread)
  # Callers can add their own needs (scripts/test.sh: the packaging tests' tools).
  # shellcheck disable=SC2206
  [ -n "${SYS1_EXTRA_PACKAGES:-}" ] && wanted+=(${SYS1_EXTRA_PACKAGES})
  python3 -m pip --version >/dev/null 2>&1 || wanted+=(python3-pip)
  for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q '^install ok installed$' ||
      missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || {
      say "need root or sudo to install: ${missing[*]}"
      exit 1
    }
    sudo=(sudo)
  fi
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Refresh the package lists only when there are none, or when they are too old to install from.
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    "${sudo[@]}" apt-get update -qq >&2
  fi
  if ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; then
    "${sudo[@]}" apt-get update -qq >&2
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
}

if command -v dpkg-query >/dev/null && command -v apt-get >/dev/null; then
  install_debian_packages
elif ! command -v cmake >/dev/null; then
  say "cmake is needed to build mlx-c (macOS: brew install cmake; Xcode's command line tools provide clang)"
  exit 1
fi

sha256_of() {
  if command -v sha256sum >/dev/null; then sha256sum "$1"; else shasum -a 256 "$1"; fi | cut -d' ' -f1
}

# 3's stamp records which wheel the tree came from: a re-run with the same pin does nothing.
stamp=$dest/.wheel-sha256
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sha256" ] && [ -d "$dest/mlx/lib" ]; then
  echo "$dest/mlx"
  exit 0
fi

# 2. The wheel, kept in .mlx/wheels so that re-unpacking needs no network.
if [ ! -f "$wheels/$wheel" ] || [ "$(sha256_of "$wheels/$wheel")" != "$sha256" ]; then
  say "downloading $package==$mlx_version ($platform)"
  mkdir -p "$wheels"
  rm -f "$wheels/$wheel"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --platform "$platform" \
    --dest "$wheels" "$package==$mlx_version" >&2
fi
[ -f "$wheels/$wheel" ] || {
  say "pip did not produce $wheels/$wheel"
  exit 1
}
actual=$(sha256_of "$wheels/$wheel")
if [ "$actual" != "$sha256" ]; then
  say "sha256 mismatch for $wheel: expected $sha256, got $actual"
  exit 1
fi

# 3. Unpack beside the final place, then swap it in, so an interrupted run leaves no half tree.
say "unpacking $wheel into ${dest#"$repo"/}"
rm -rf "$dest.tmp"
python3 -m zipfile -e "$wheels/$wheel" "$dest.tmp"
echo "$sha256" >"$dest.tmp/.wheel-sha256"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
echo "$dest/mlx"

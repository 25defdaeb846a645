#!/usr/bin/env bash
# Stages what bench/gpu/cuda.sh needs into .carry/cuda/bundle.tar.xz (ignored: add `/.carry/`
# to .git/info/exclude), from the ordinary CPU build: the CUDA engine opens the driver, NVRTC
# and cuBLASLt at run time, so a binary built against the CPU MLX wheel runs `--engine cuda`.
#
#   bench/gpu/carry-cuda.sh [--build]
#
# The bundle (~15 MB): bin/{sys1rust,sys1rust-tests,cuda-tests,make-checkpoint,cuda-profile,
# decide-host}
# (stripped; with BASE_BIN=<an earlier build of sys1rust> also bin/sys1rust-base, for
# cuda.sh's `ab`, with BASE_PROFILE=<that build's cuda-profile> bin/cuda-profile-base, and
# with MID_BIN=<an intermediate build> bin/sys1rust-mid;
# Debian's OpenBLAS, which the GPU machine lacks, dropped from their needs: the CUDA engine
# does no CPU BLAS), lib/ (libmlx.so of the CPU wheel and the libraries it bundles), wrk/
# (Debian's wrk and LuaJIT, the load generator) and whl/ (upstream laya 0.4.15, pure Python).
# The fixtures and workloads travel with the working tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
WORK=$ROOT/.carry/cuda-work
OUTD=$ROOT/.carry/cuda

# The path of a crate's integration test binary (`tests/tests.rs`).
test_binary() {
  scripts/test-binary.sh --release -p "$1"
}

if [ "${1:-}" = --build ]; then
  cargo build --release -p sys1rust --bins
  cargo build --release -p laya-mlx --example make-checkpoint
  cargo build --release -p laya-cuda --example cuda-profile
  cargo build --release -p laya-fixtures --example decide-host
fi
command -v patchelf >/dev/null || { echo "carry-cuda.sh: needs patchelf" >&2; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK/bin" "$WORK/lib" "$WORK/wrk" "$WORK/whl" "$OUTD"
sys1_tests=$(test_binary sys1rust)
cuda_tests=$(test_binary laya-cuda)
pairs=("sys1rust:target/release/sys1rust" "sys1rust-tests:$sys1_tests" "cuda-tests:$cuda_tests"
  "make-checkpoint:target/release/examples/make-checkpoint"
  "cuda-profile:target/release/examples/cuda-profile"
  "decide-host:target/release/examples/decide-host")
# Builds of other trees for cuda.sh's `ab` and `steps` (BASE_BIN: an earlier commit's
# sys1rust built the same way, so that a change is measured against what it replaces in the
# same call).
[ -n "${BASE_BIN:-}" ] && pairs+=("sys1rust-base:$BASE_BIN")
[ -n "${MID_BIN:-}" ] && pairs+=("sys1rust-mid:$MID_BIN")
[ -n "${BASE_PROFILE:-}" ] && pairs+=("cuda-profile-base:$BASE_PROFILE")
for pair in "${pairs[@]}"; do
  name=${pair%%:*} src=${pair#*:}
  strip -o "$WORK/bin/$name" "$src"
  # patchelf does nothing to a binary that never needed OpenBLAS (cuda-profile).
  patchelf --remove-needed libopenblas.so.0 "$WORK/bin/$name"
done
# sys1rust's tests start the server at the path baked in at build time: cuda.sh links it.
echo "$ROOT/target/release/sys1rust" > "$WORK/bin/sys1rust.bin-path"
cp .mlx/cpu/mlx/lib/libmlx.so .mlx/cpu/mlx_cpu.libs/* "$WORK/lib/"
(
  cd "$WORK"
  apt-get download wrk libluajit-5.1-2 >/dev/null 2>&1
  for f in ./*.deb; do dpkg -x "$f" deb; done
  cp deb/usr/bin/wrk wrk/
  cp -P deb/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2* wrk/
  rm -rf deb ./*.deb
)
# Kept under .carry/ (ignored) between runs, so the tree stays clean and pip runs once.
whl=$ROOT/.carry/whl/laya-0.4.15-py3-none-any.whl
if [ ! -f "$whl" ]; then
  python3 -m pip download -q --no-deps -d "$(dirname "$whl")" laya==0.4.15
fi
cp "$whl" "$WORK/whl/"
XZ_OPT="-6 -T0" tar -C "$WORK" -cJf "$OUTD/bundle.tar.xz" bin lib wrk whl
ls -la "$OUTD"

#!/usr/bin/env bash
# Stages what a GPU device call needs into .carry/ (ignored: add `/.carry/` to .git/info/exclude),
# in groups that each fit one call of the device tool (64 MiB per call, working tree included).
#
#   bench/gpu/carry.sh [--build]
#
# --build first builds sys1rust, the make-checkpoint and gpu-probe examples and the test
# binaries of sys1rust (its replay module) and laya-cuda against the mlx-cuda-13 wheel
# (scripts/setup-mlx.sh cuda13) in target/cuda.
#
# What it writes (each file goes into the first group with room, so everything usually fits
# in .carry/p1 and one call):
#   bin.tar.xz        bin/{sys1rust,make-checkpoint,gpu-probe,op-timing,replay,cuda-answers}
#                     (stripped; replay and cuda-answers are the test binaries) and
#                     stub/libmlx.so (no-op symbols: make-checkpoint links libmlx but never calls
#                     it, so the checkpoint can be made before libmlx is in place)
#   site.tar.xz       site/mlx/{include,share} and site/mlx_cuda_13.libs: the rest of the wheel
#                     (NVRTC reads include/ at run time)
#   data.tar.xz       fixtures/{checkpoint-configs,tokenizers,workloads} (crates/laya-fixtures/data)
#                     and seed/*.jsonl (../shared/seed-workloads, else the fixtures' workloads)
#   laya-0.4.15-py3-none-any.whl   upstream, pure Python (the device has its dependencies)
#   libmlx.so.xz.partN libmlx.so with the GPU images of other architectures zeroed
#                     (bench/gpu/slim-fatbin.py, SM=90 for the H200): ~15 MB instead of 68 MB
#   fixtures.tar.xz   fixtures/{checkpoints,references} (the f16 replay); CARRY_FIXTURES=0 leaves
#                     it out
#   upstream-wheels.tar.xz  upstream laya-serve's HTTP dependencies, when
#                     bench/gpu/upstream-wheels.sh has staged them
#   MANIFEST          sha256 of the carried libmlx.so and the list of its parts
# Results of an earlier machine that a fresh one should not redo (upstream's answers and
# reports, say) can be put in .carry/prev/: they travel in whichever group has room, and
# run.sh setup copies them into $STAGE/res.
# On the device, bench/gpu/run.sh setup unpacks whatever groups have arrived into $STAGE
# (/tmp/sys1) and assembles libmlx.so once all its parts are there; the device keeps ignored
# files and /tmp between calls only while it stays warm (30 s), so several groups must go in
# consecutive calls.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
SHARED=${SYS1_SHARED:-$ROOT/../shared}
# The test fixtures (checkpoints, references, tokenizer, configs) are the repository's own.
FIXTURES=${SYS1_FIXTURES:-$ROOT/crates/laya-fixtures/data}
CARRY_MIB=${CARRY_MIB:-58}
TARGET=target/cuda
WORK=$ROOT/.carry/work

# The path of a crate's integration test binary (`tests/tests.rs`).
test_binary() {
  scripts/test-binary.sh --release -p "$1" --target-dir $TARGET
}

if [ "${1:-}" = --build ]; then
  MLX=$(bash scripts/setup-mlx.sh cuda13)
  export MLX_SYS_PREBUILT_DIR=$MLX
  cargo build --release -p sys1rust --bins --target-dir $TARGET
  cargo build --release -p laya-mlx --examples --target-dir $TARGET
  cargo test --release -p sys1rust --test tests --no-run --target-dir $TARGET
  cargo test --release -p laya-cuda --test tests --no-run --target-dir $TARGET
  cargo build --release -p laya-cuda --examples --target-dir $TARGET
fi
MLXROOT=$ROOT/.mlx/cuda13
[ -f "$MLXROOT/mlx/lib/libmlx.so" ] || { echo "run scripts/setup-mlx.sh cuda13 first" >&2; exit 1; }

SM=${SM:-90}
rm -rf .carry/p[0-9]* "$WORK"
mkdir -p "$WORK/out" "$WORK/bin" "$WORK/stub" "$WORK/site/mlx" "$WORK/fixtures" "$WORK/seed"
OUTD=$WORK/out

# sys1rust's test binary (run for its replay module) starts process servers at the path baked
# in at compile time ($ROOT/target/cuda/release/sys1rust): run.sh links that path to the
# carried binary. MLX_SYS_PREBUILT_DIR keeps cargo from rebuilding against the CPU wheel.
export MLX_SYS_PREBUILT_DIR=${MLX_SYS_PREBUILT_DIR:-$ROOT/.mlx/cuda13/mlx}
replay=$(test_binary sys1rust)
cuda_answers=$(test_binary laya-cuda)
[ -x "$replay" ] && [ -x "$cuda_answers" ] || { echo "carry.sh: test binaries not built (--build)" >&2; exit 1; }
strip -o "$WORK/bin/sys1rust" $TARGET/release/sys1rust
strip -o "$WORK/bin/make-checkpoint" $TARGET/release/examples/make-checkpoint
strip -o "$WORK/bin/gpu-probe" $TARGET/release/examples/gpu-probe
strip -o "$WORK/bin/op-timing" $TARGET/release/examples/op-timing
strip -o "$WORK/bin/replay" "$replay"
strip -o "$WORK/bin/cuda-answers" "$cuda_answers"
strip -o "$WORK/bin/cuda-profile" $TARGET/release/examples/cuda-profile
echo "$ROOT/$TARGET/release/sys1rust" > "$WORK/bin/replay.bin-path"

# Stand-ins for the libmlx symbols make-checkpoint links (it never calls them).
nm -D --undefined-only $TARGET/release/examples/make-checkpoint |
  awk '$1 == "U" && $2 ~ /^_ZN3mlx/ {print "void " $2 "(void) { __builtin_trap(); }"}' > "$WORK/stub/stub.c"
cc -shared -fPIC -O1 -o "$WORK/stub/libmlx.so" "$WORK/stub/stub.c"

tar -C "$WORK" -cJf "$OUTD/bin.tar.xz" bin stub
cp -r "$MLXROOT/mlx/include" "$MLXROOT/mlx/share" "$WORK/site/mlx/"
cp -r "$MLXROOT/mlx_cuda_13.libs" "$WORK/site/"
XZ_OPT=-9 tar -C "$WORK" -cJf "$OUTD/site.tar.xz" site
cp -r "$FIXTURES/checkpoint-configs" "$FIXTURES/tokenizers" "$FIXTURES/workloads" "$WORK/fixtures/"
# The benchmark workloads: the seed workloads earlier results were measured on when they are
# beside the checkout, else the fixtures' synthetic ones (the same shape ids).
if [ -d "$SHARED/seed-workloads" ]; then
  cp "$SHARED/seed-workloads/"*.jsonl "$WORK/seed/"
else
  cp "$FIXTURES/workloads/smoke.jsonl" "$FIXTURES/workloads/short.jsonl" "$WORK/seed/"
fi
tar -C "$WORK" -cJf "$OUTD/data.tar.xz" fixtures seed
if [ "${CARRY_FIXTURES:-1}" != 0 ]; then
  mkdir -p "$WORK/fx"
  cp -r "$FIXTURES/checkpoints" "$FIXTURES/references" "$WORK/fx/"
  tar -C "$WORK/fx" --transform 's,^,fixtures/,' -cJf "$OUTD/fixtures.tar.xz" checkpoints references
fi

whl=$(ls .whl/laya-0.4.15-py3-none-any.whl 2>/dev/null || true)
if [ -z "$whl" ]; then
  mkdir -p .whl
  python3 -m pip download -q --no-deps -d .whl laya==0.4.15
  whl=.whl/laya-0.4.15-py3-none-any.whl
fi
cp "$whl" "$OUTD/"

# libmlx.so for sm_$SM only, xz -9, cached by the source library's sha256.
slim() { # <libmlx.so> -> path of its cached slim .xz
  local sum xzf
  sum=$(sha256sum "$1" | cut -d' ' -f1)
  xzf=$ROOT/.carry/libmlx-$sum-sm$SM.so.xz
  if [ ! -f "$xzf" ]; then
    echo "slimming and compressing $1 (a minute)" >&2
    python3 bench/gpu/slim-fatbin.py "$1" "$WORK/libmlx-slim.so" "$SM"
    xz -9 -T0 -c "$WORK/libmlx-slim.so" > "$xzf.tmp"
    xz -dc "$xzf.tmp" | sha256sum | cut -d' ' -f1 > "$xzf.sha256"
    mv "$xzf.tmp" "$xzf"
  fi
  echo "$xzf"
}
xzf=$(slim "$MLXROOT/mlx/lib/libmlx.so")
cp "$xzf" "$OUTD/libmlx.so.xz.part1"
{
  echo "libmlx.so $(cat "$xzf.sha256")"
  echo "libmlx.so.xz.part1 $(sha256sum "$OUTD/libmlx.so.xz.part1" | cut -d' ' -f1)"
} > "$OUTD/MANIFEST"

# Upstream's HTTP server dependencies (bench/gpu/upstream-wheels.sh), when staged.
[ -f .carry/upstream-wheels.tar.xz ] && cp .carry/upstream-wheels.tar.xz "$OUTD/"
[ -d .carry/prev ] && cp -r .carry/prev "$OUTD/prev"

# Fill the groups in order: each file into the first group with room for it.
limit=$((CARRY_MIB * 1024 * 1024))
for f in "$OUTD"/*; do
  size=$(du -sb "$f" | cut -f1)
  g=1
  while [ -d .carry/p$g ] && [ $(($(du -sb .carry/p$g | cut -f1) + size)) -gt $limit ]; do
    g=$((g + 1))
  done
  mkdir -p .carry/p$g
  mv "$f" .carry/p$g/
done
mf=$(ls .carry/p[0-9]*/MANIFEST)
cp "$mf" .carry/MANIFEST
for d in .carry/p[0-9]*/; do cp .carry/MANIFEST "$d"; done
rm -rf "$WORK"
for d in .carry/p[0-9]*/; do
  printf '%s %s MiB: %s\n' "$d" "$(($(du -sb $d | cut -f1) / 1048576))" "$(ls $d | tr '\n' ' ')"
done

#!/usr/bin/env bash
# Stages what a GPU device call needs into .carry/ (ignored: add `/.carry/` to .git/info/exclude),
# in groups that each fit one call of the device tool (64 MiB per call, working tree included).
#
#   bench/gpu/carry.sh [--build]
#
# --build first builds sys1rust, the make-checkpoint example and the replay test binary against
# the mlx-cuda-13 wheel (scripts/setup-mlx.sh cuda13) in target/cuda.
#
# What it writes:
#   .carry/p1/  bin.tar.xz        bin/{sys1rust,make-checkpoint,replay} (stripped) and
#                                 stub/libmlx.so (6 no-op symbols: make-checkpoint links libmlx
#                                 but never calls it, so the checkpoint is made before libmlx
#                                 has arrived)
#               site.tar.xz       site/mlx/{include,share} and site/mlx_cuda_13.libs: the rest of
#                                 the wheel (NVRTC reads include/ at run time)
#               data.tar.xz       fixtures/{checkpoint-configs,tokenizers,workloads} and
#                                 seed/*.jsonl (the seed workloads)
#               laya-0.4.15-py3-none-any.whl   upstream, pure Python (the device has its deps)
#               libmlx.so.xz.partN            the first part(s) of libmlx.so, xz -9
#               MANIFEST          sha256 of libmlx.so and the list of its parts
#   .carry/p2/  fixtures.tar.xz   fixtures/{checkpoints,references} (the f16 replay), and the
#                                 remaining libmlx part(s)
# Results of an earlier machine that a fresh one should not redo (upstream's answers and
# reports, say) can be put in .carry/p2/prev/: run.sh setup copies them into $STAGE/res.
# Each group stays under CARRY_MIB (default 58) so the working tree (a few MiB) fits beside it.
# On the device, bench/gpu/run.sh setup unpacks whatever groups have arrived into $STAGE
# (/tmp/sys1) and assembles libmlx.so once all its parts are there; the device keeps ignored
# files and /tmp between calls only while it stays warm (30 s), so send p1 and p2 in
# consecutive calls: `run` with carry [".carry/p1"], then carry [".carry/p2"].
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
SHARED=${SYS1_SHARED:-$ROOT/../shared}
CARRY_MIB=${CARRY_MIB:-58}
TARGET=target/cuda
WORK=$ROOT/.carry/work

if [ "${1:-}" = --build ]; then
  MLX=$(bash scripts/setup-mlx.sh cuda13)
  export MLX_SYS_PREBUILT_DIR=$MLX
  cargo build --release -p sys1rust --bins --target-dir $TARGET
  cargo build --release -p laya-mlx --examples --target-dir $TARGET
  cargo test --release -p sys1rust --test replay --no-run --target-dir $TARGET
fi
MLXROOT=$ROOT/.mlx/cuda13
[ -f "$MLXROOT/mlx/lib/libmlx.so" ] || { echo "run scripts/setup-mlx.sh cuda13 first" >&2; exit 1; }

rm -rf .carry/p1 .carry/p2 "$WORK"
mkdir -p .carry/p1 .carry/p2 "$WORK/bin" "$WORK/stub" "$WORK/site/mlx" "$WORK/fixtures" "$WORK/seed"

# The replay test binary: the newest target/cuda/release/deps/replay-<hash>. It starts the
# server at the path baked in at compile time ($ROOT/target/cuda/release/sys1rust): run.sh
# links that path to the carried binary.
replay=$(ls -t $TARGET/release/deps/replay-* | grep -v '\.d$' | head -1)
strip -o "$WORK/bin/sys1rust" $TARGET/release/sys1rust
strip -o "$WORK/bin/make-checkpoint" $TARGET/release/examples/make-checkpoint
strip -o "$WORK/bin/replay" "$replay"
echo "$ROOT/$TARGET/release/sys1rust" > "$WORK/bin/replay.bin-path"

# Stand-ins for the libmlx symbols make-checkpoint links (it never calls them).
nm -D --undefined-only $TARGET/release/examples/make-checkpoint |
  awk '$1 == "U" && $2 ~ /^_ZN3mlx/ {print "void " $2 "(void) { __builtin_trap(); }"}' > "$WORK/stub/stub.c"
cc -shared -fPIC -O1 -o "$WORK/stub/libmlx.so" "$WORK/stub/stub.c"

tar -C "$WORK" -cJf .carry/p1/bin.tar.xz bin stub
cp -r "$MLXROOT/mlx/include" "$MLXROOT/mlx/share" "$WORK/site/mlx/"
cp -r "$MLXROOT/mlx_cuda_13.libs" "$WORK/site/"
XZ_OPT=-9 tar -C "$WORK" -cJf .carry/p1/site.tar.xz site
cp -r "$SHARED/fixtures/checkpoint-configs" "$SHARED/fixtures/tokenizers" "$SHARED/fixtures/workloads" "$WORK/fixtures/"
cp "$SHARED/seed-workloads/"*.jsonl "$WORK/seed/"
tar -C "$WORK" -cJf .carry/p1/data.tar.xz fixtures seed
mkdir -p "$WORK/fx"
cp -r "$SHARED/fixtures/checkpoints" "$SHARED/fixtures/references" "$WORK/fx/"
tar -C "$WORK/fx" --transform 's,^,fixtures/,' -cJf .carry/p2/fixtures.tar.xz checkpoints references

whl=$(ls .whl/laya-0.4.15-py3-none-any.whl 2>/dev/null || true)
if [ -z "$whl" ]; then
  mkdir -p .whl
  python3 -m pip download -q --no-deps -d .whl laya==0.4.15
  whl=.whl/laya-0.4.15-py3-none-any.whl
fi
cp "$whl" .carry/p1/

# libmlx.so, xz -9 (the slow step: minutes on two cores), cached by the library's sha256.
sum=$(sha256sum "$MLXROOT/mlx/lib/libmlx.so" | cut -d' ' -f1)
xzf=$ROOT/.carry/libmlx-$sum.so.xz
if [ ! -f "$xzf" ]; then
  echo "compressing libmlx.so (xz -9, minutes)" >&2
  xz -9 -T0 -c "$MLXROOT/mlx/lib/libmlx.so" > "$xzf.tmp"
  mv "$xzf.tmp" "$xzf"
fi

# Fill p1 then p2 (then p3...) up to CARRY_MIB each with consecutive pieces of the .xz.
limit=$((CARRY_MIB * 1024 * 1024))
total=$(stat -c %s "$xzf")
offset=0
part=1
group=1
parts=()
while [ $offset -lt $total ]; do
  dir=.carry/p$group
  mkdir -p $dir
  used=$(du -cb $dir | tail -1 | cut -f1)
  room=$((limit - used))
  if [ $room -le $((1024 * 1024)) ]; then
    group=$((group + 1))
    continue
  fi
  n=$((total - offset < room ? total - offset : room))
  dd if="$xzf" of=$dir/libmlx.so.xz.part$part bs=1M iflag=skip_bytes,count_bytes skip=$offset count=$n status=none
  parts+=("libmlx.so.xz.part$part $(sha256sum $dir/libmlx.so.xz.part$part | cut -d' ' -f1)")
  offset=$((offset + n))
  part=$((part + 1))
  group=$((group + 1))
done
{
  echo "libmlx.so $sum"
  printf '%s\n' "${parts[@]}"
} > .carry/p1/MANIFEST
cp .carry/p1/MANIFEST .carry/MANIFEST
rm -rf "$WORK"
for d in .carry/p*/; do
  printf '%s %s MiB: %s\n' "$d" "$(($(du -cb $d | tail -1 | cut -f1) / 1048576))" "$(ls $d | tr '\n' ' ')"
done

#!/usr/bin/env bash
# Session 16, call 3, refused for want of device time and kept for the next session: with
# bulk-tensor-store.patch applied, gemm_tma's f16 outputs leave by bulk tensor stores from the
# staging tile (the next tile's products run meanwhile). Per-layer bits and cold timings with
# SYS1_CUDA_GEMM_OWN=1 (cuda-profile, debug log) and its replays. Bundle: cuda-profile and
# make-checkpoint alone.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
mkdir -p $STAGE/res && tar -C $STAGE -xJf .carry/cuda/bundle.tar.xz
export LD_LIBRARY_PATH=$STAGE/lib:/usr/local/cuda/lib64
R=$STAGE/res
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/machine.txt
$STAGE/bin/make-checkpoint --preset large --seed 4242 --out $STAGE/large --configs crates/laya-fixtures/data > $R/checkpoint.json
strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }
OWN=1 RUST_LOG=laya_cuda=debug ITERS=30 timeout -k 5 100 $STAGE/bin/cuda-profile $STAGE/large 1x600 4x600 10x600 \
  > $R/prof-own.jsonl 2> $R/prof-own.log
echo "profile own=1 rc=$?"
tar -C $STAGE -czf $OUT/res.tar.gz res
strip_ansi < $R/prof-own.log | grep -E "other bits|failed|panick|rror|short pass timed (2560|6144)|timed apart and fused (2560|6144)" \
  | sed -E 's/^.*laya_cuda::gemm: //; s/s=Shape \{ tokens: ([0-9]+), out: ([0-9]+), inp: ([0-9]+), kind: ([A-Za-z]+) \}/\1 \2x\3 \4/' | cut -c1-250 | head -30
echo "same-bits checks: $(strip_ansi < $R/prof-own.log | grep -c 'the same bits')"
cut -c1-80 $R/prof-own.jsonl

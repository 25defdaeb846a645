#!/usr/bin/env bash
# Session 14, call 2: the cluster forms with their consumers' remote arrivals at the default
# (block-scope) semantics, one lane a destination block. Per-layer bit checks and cold
# timings of every form (cuda-profile, OWN=1, debug log).
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
nvidia-smi -L > $R/machine.txt
strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }
OWN=1 RUST_LOG=laya_cuda=debug ITERS=50 timeout -k 5 150 $STAGE/bin/cuda-profile $STAGE/large 1x600 4x600 10x600 \
  > $R/prof-1-r1.jsonl 2> $R/prof-1-r1.log
rc=$?; echo "profile own=1 rc=$rc"
strip_ansi < $R/prof-1-r1.log | grep -E "other bits|failed|panick|rror|short pass timed (640|2560|6144)|timed apart and fused (640|2560|6144)" \
  | sed -E 's/^.*laya_cuda::gemm: //; s/s=Shape \{ tokens: ([0-9]+), out: ([0-9]+), inp: ([0-9]+), kind: ([A-Za-z]+) \}/\1 \2x\3 \4/' | cut -c1-330 | head -70
strip_ansi < $R/prof-1-r1.log | grep -c "the same bits"
cut -c1-120 $R/prof-1-r1.jsonl
tar -C $STAGE -czf $OUT/res.tar.gz res

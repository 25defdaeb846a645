#!/usr/bin/env bash
# Session 16, call 1: the harness at the landed tree (c22d0de) with upstream stock and
# compiled in the same call (GPU tests, in-process 12 sizes, upstream, parity), then a
# diagnostic build's cuda-profile (gemm_tma's 192-row form without its epilogue, without
# waiting for data after its first stages, and without products) at 10x600.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
# The same checkpoint's (seed 4242, sha256 d7e17c58...) upstream cpu-f32 answers.
cp results/gpu/s19-short-default/call2/answers-upstream-cpu-f32.jsonl $R/
CALL_LIMIT=$((480 - SECONDS)) RUNS=30 bench/gpu/cuda.sh tests engine upstream parity
left=$((575 - SECONDS)); echo "diag: ${left}s left"
strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }
if [ $left -gt 50 ]; then
  OWN=1 RUST_LOG=laya_cuda=debug ITERS=5 timeout -k 5 $((left - 10)) $STAGE/bin/cuda-profile-diag $STAGE/large 10x600 \
    > $R/diag.jsonl 2> $R/diag.log
  echo "diag rc=$?"
  strip_ansi < $R/diag.log | grep -E "other bits|failed|panick|rror|short pass timed|timed apart and fused" \
    | sed -E 's/^.*laya_cuda::gemm: //; s/s=Shape \{ tokens: ([0-9]+), out: ([0-9]+), inp: ([0-9]+), kind: ([A-Za-z]+) \}/\1 \2x\3 \4/' | cut -c1-330 | head -40
fi
tar -C $STAGE -czf $OUT/res.tar.gz res

#!/usr/bin/env bash
# Session 16, call 2: gemm_tma's outputs through a staging tile in shared memory (whole rows
# written 16 bytes a thread) instead of 4-byte pairs where they land. Per-layer bits and cold
# timings with SYS1_CUDA_GEMM_OWN=1 (cuda-profile, debug log) and replays with and without;
# the GPU tests; then, only if they pass, `ab` with OWN=1 against OWN=0 (one binary).
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }
OWN=1 RUST_LOG=laya_cuda=debug ITERS=50 timeout -k 5 150 $STAGE/bin/cuda-profile $STAGE/large 1x150 1x600 4x600 10x600 \
  > $R/prof-own.jsonl 2> $R/prof-own.log
echo "profile own=1 rc=$?"
strip_ansi < $R/prof-own.log | grep -E "other bits|failed|panick|rror|short pass timed (640|2560|6144)|timed apart and fused (640|2560|6144)|same bits of" \
  | sed -E 's/^.*laya_cuda::gemm: //; s/s=Shape \{ tokens: ([0-9]+), out: ([0-9]+), inp: ([0-9]+), kind: ([A-Za-z]+) \}/\1 \2x\3 \4/' | cut -c1-300 | head -40
echo "same-bits checks: $(strip_ansi < $R/prof-own.log | grep -c 'the same bits')"
ITERS=50 timeout -k 5 120 $STAGE/bin/cuda-profile $STAGE/large 1x150 1x600 4x600 10x600 > $R/prof-base.jsonl 2> $R/prof-base.log
echo "profile own=0 rc=$?"
for f in own base; do python3 -c '
import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l); print(sys.argv[2], d["shape"], "run ms %.3f" % d["run_ms_median"])' $R/prof-$f.jsonl $f; done
tar -C $STAGE -czf $OUT/res.tar.gz res
bench/gpu/cuda.sh tests
tar -C $STAGE -czf $OUT/res.tar.gz res
grep -q "test result: ok" $R/cuda-tests.log && ! grep -q "FAILED" $R/cuda-tests.log || { echo "tests failed: no ab"; exit 1; }
export SYS1_CUDA_GEMM_OWN=1
BASE_ENV=SYS1_CUDA_GEMM_OWN=0 PARITY_REF=$PWD/results/gpu/s19-short-default/call2/answers-upstream-cpu-f32.jsonl \
  AB_ROUNDS=2 CALL_LIMIT=$((580 - SECONDS)) bench/gpu/cuda.sh ab
tar -C $STAGE -czf $OUT/res.tar.gz res

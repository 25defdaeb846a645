#!/usr/bin/env bash
# Session 14, call 1: gemm_tma in clusters of two (192 rows, 4 and 5 stages) beside the
# landed forms. First the per-layer bit checks and timings of every form (cuda-profile,
# OWN=1, debug log; a hang stops here), then the GPU tests, then `ab` with
# SYS1_CUDA_GEMM_OWN=1 against =0 (one binary): smoke answers byte for byte, parity, and
# two alternating rounds of in-process shapes and wrk s32_q1 / s512_q10.
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
strip_ansi < $R/prof-1-r1.log | grep -E "other bits|failed|panick|rror|same bits|short pass timed (640|2560|6144)|timed apart and fused (640|2560|6144)" \
  | sed -E 's/^.*laya_cuda::gemm: //; s/s=Shape \{ tokens: ([0-9]+), out: ([0-9]+), inp: ([0-9]+), kind: ([A-Za-z]+) \}/\1 \2x\3 \4/' | head -70
tar -C $STAGE -czf $OUT/res.tar.gz res
[ $rc = 0 ] || exit 1
cat $R/prof-1-r1.jsonl | cut -c1-200
bench/gpu/cuda.sh tests
grep -h -E "test result|FAILED|panicked|assertion|bit-identical|GEMM families|cuda f16|took it|ran fused" $R/cuda-tests.log | head -30
tar -C $STAGE -czf $OUT/res.tar.gz res
export SYS1_CUDA_GEMM_OWN=1
BASE_ENV=SYS1_CUDA_GEMM_OWN=0 PARITY_REF=$PWD/results/gpu/s19-short-default/call2/answers-upstream-cpu-f32.jsonl \
  AB_ROUNDS=2 bench/gpu/cuda.sh ab
tar -C $STAGE -czf $OUT/res.tar.gz res

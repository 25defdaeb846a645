#!/usr/bin/env bash
# Session 12, call 5: HEAD after the forward pass's GEMM call sites were rewritten (same
# launches): the GPU tests, and the smoke answers served with SYS1_CUDA_GEMM_OWN=1 against 0.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
bench/gpu/cuda.sh tests
tar -C $STAGE -czf $OUT/res.tar.gz res
export SYS1_CUDA_GEMM_OWN=1
BASE_ENV=SYS1_CUDA_GEMM_OWN=0 PARITY_REF=$PWD/results/gpu/s19-short-default/call2/answers-upstream-cpu-f32.jsonl \
  AB_ROUNDS=0 RUNS=5 AB_SHAPES=s128_q1 bench/gpu/cuda.sh ab
tar -C $STAGE -czf $OUT/res.tar.gz res

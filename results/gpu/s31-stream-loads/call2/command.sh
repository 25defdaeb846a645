#!/usr/bin/env bash
# Call 2 (on the machine call 1 warmed): the served binary with our own GEMMs on (stream
# loads built in) against the same binary with them off, in alternating rounds.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
[ -d $STAGE/res ] && rm -rf $STAGE/res1 && mv $STAGE/res $STAGE/res1
export SYS1_CUDA_GEMM_OWN=1 BASE_ENV=SYS1_CUDA_GEMM_OWN=0 AB_ROUNDS=2 RUNS=30 WRK_SECONDS=8 \
  AB_SHAPES=s128_q1,s512_q1,s512_q4,s256_q10,s512_q10
bench/gpu/cuda.sh setup checkpoint ab 2>&1 | sed 's/\x1b\[[0-9;]*m//g' | grep -E "cuda.sh|parity|rror|panick" | cut -c1-400

#!/usr/bin/env bash
# Session 20, call B (on call A's machine if it is still warm): the GPU tests; served
# throughput with wrk at the default settings (s32_q1 and s512_q10 at 16 clients, s32_q1 at
# 64 with --max-concurrent 64); then our GEMMs on against off, served and in process, in
# alternating rounds on the same binary.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
[ -d $STAGE/res ] && rm -rf $STAGE/resA && mv $STAGE/res $STAGE/resA
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/machine.txt
[ -d $STAGE/resA ] && echo "call A's machine, still warm" >> $R/machine.txt
bench/gpu/cuda.sh tests
echo "tests done at ${SECONDS}s"
RUNS=30 WRK_SECONDS=8 SERVED_ALONE=0 bench/gpu/cuda.sh served
echo "served done at ${SECONDS}s"
SYS1_CUDA_GEMM_OWN=1 BASE_ENV=SYS1_CUDA_GEMM_OWN=0 AB_ROUNDS=2 RUNS=30 WRK_SECONDS=8 \
  AB_SHAPES=s64_q1,s128_q1,s256_q4,s256_q10,s512_q10 timeout -k 5 $((585 - SECONDS)) bench/gpu/cuda.sh ab
echo "done at ${SECONDS}s"
tar -C $STAGE -czf $OUT/res.tar.gz res

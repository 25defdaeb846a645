#!/usr/bin/env bash
# Session 20, call A: the harness at the landed tree (1ccbeb3) with upstream stock and compiled
# in one call, compiled given the call's whole remainder so that it reaches all 12 sizes:
# in-process 12 sizes with our GEMMs off (the default) and on (SYS1_CUDA_GEMM_OWN=1),
# upstream stock, upstream compiled, parity of the contenders' answers.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/machine.txt
nproc >> $R/machine.txt
# The same checkpoint's (seed 4242) upstream cpu-f32 answers.
cp results/gpu/s19-short-default/call2/answers-upstream-cpu-f32.jsonl $R/
RUNS=30 bench/gpu/cuda.sh engine
mv $R/sys1rust-cuda-inproc.json $R/sys1rust-cuda-inproc-own0.json
mv $R/sys1rust-cuda-inproc.log $R/sys1rust-cuda-inproc-own0.log
SYS1_CUDA_GEMM_OWN=1 RUNS=30 bench/gpu/cuda.sh engine
mv $R/sys1rust-cuda-inproc.json $R/sys1rust-cuda-inproc-own1.json
mv $R/sys1rust-cuda-inproc.log $R/sys1rust-cuda-inproc-own1.log
echo "engine done at ${SECONDS}s"
CALL_LIMIT=$((590 - SECONDS)) RUNS=30 bench/gpu/cuda.sh upstream parity
echo "done at ${SECONDS}s"
tar -C $STAGE -czf $OUT/res.tar.gz res

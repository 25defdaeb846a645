#!/usr/bin/env bash
# Session 12, call 2: which fused step changes bits: the GPU tests (own without fusion, each
# step forced alone, own timed), then the smoke answers served with each setting.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
bench/gpu/cuda.sh tests
grep -h -E "assertion|left:|right:|fused|gemm_wg" $R/cuda-tests.log | head -30
tar -C $STAGE -czf $OUT/res.tar.gz res

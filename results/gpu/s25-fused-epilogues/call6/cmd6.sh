#!/usr/bin/env bash
# Session 12, call 6: HEAD (ac65a4e: the fused-RoPE check's positions from probe_positions):
# the GPU tests only.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint tests
tar -C $STAGE -czf $OUT/res.tar.gz res

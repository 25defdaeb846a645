#!/usr/bin/env bash
# Session 20, call D: the GPU tests after the batch-mates check moved into laya-fixtures
# (the same compositions, seeds and messages), and the replay of the fixture references
# served on the CUDA engine, at 9b89e05.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/machine.txt
bench/gpu/cuda.sh tests replay
echo "done at ${SECONDS}s"
tar -C $STAGE -czf $OUT/res.tar.gz res

#!/usr/bin/env bash
# Session 20, call C: the served checks last run on 2026-12-02, at the landed tree (1ccbeb3's
# binaries): the fixture references served on the CUDA engine and the router's references
# (replay), 50 SIGTERM shutdowns idle and with requests in flight, and two engine workers on
# the one GPU against one (smoke's answers byte for byte, then the wrk loads).
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/machine.txt
CALL_LIMIT=$((590 - SECONDS)) WRK_SECONDS=8 bench/gpu/cuda.sh replay shutdowns workers
echo "done at ${SECONDS}s"
tar -C $STAGE -czf $OUT/res.tar.gz res

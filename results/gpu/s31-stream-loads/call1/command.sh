#!/usr/bin/env bash
# Session 17, call 1: gemm_tma's outputs leave by bulk tensor stores from the staging tile
# (bulk-tensor-store.patch of s29, in cuda-profile-base), and the f32 stream's kinds also
# load the stream's tile by TMA, its first half during the products (cuda-profile,
# cuda-tests). Per-layer bits and cold timings with SYS1_CUDA_GEMM_OWN=1 (cuda-profile, debug
# log); the GPU tests; the same profile of the bulk-stores build; replays with OWN=0 if time
# is left (the session's device time was nearly spent on machines that did not start).
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/machine.txt
strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }
show() {
  strip_ansi < $1 | grep -E "other bits|failed|panick|rror|short pass timed (2560|6144)|timed apart and fused (2560|6144)" \
    | sed -E 's/^.*laya_cuda::gemm: //; s/s=Shape \{ tokens: ([0-9]+), out: ([0-9]+), inp: ([0-9]+), kind: ([A-Za-z]+) \}/\1 \2x\3 \4/' | cut -c1-300 | head -40
  echo "same-bits checks: $(strip_ansi < $1 | grep -c 'the same bits')"
}
replays() { python3 -c '
import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l); print(sys.argv[2], d["shape"], "run ms %.3f" % d["run_ms_median"])' $R/prof-$1.jsonl $1; }
OWN=1 RUST_LOG=laya_cuda=debug ITERS=30 timeout -k 5 120 $STAGE/bin/cuda-profile $STAGE/large 1x600 4x600 10x600 \
  > $R/prof-own.jsonl 2> $R/prof-own.log
echo "profile own=1 (stream prefetch) rc=$? at ${SECONDS}s"; show $R/prof-own.log; replays own
tar -C $STAGE -czf $OUT/res.tar.gz res
bench/gpu/cuda.sh tests
echo "tests done at ${SECONDS}s"
grep -h -E "test result|FAILED|panicked|assertion" $R/cuda-tests.log | head -10
tar -C $STAGE -czf $OUT/res.tar.gz res
OWN=1 RUST_LOG=laya_cuda=debug ITERS=30 timeout -k 5 120 $STAGE/bin/cuda-profile-base $STAGE/large 1x600 4x600 10x600 \
  > $R/prof-bulk.jsonl 2> $R/prof-bulk.log
echo "profile own=1 (bulk stores only) rc=$? at ${SECONDS}s"; show $R/prof-bulk.log; replays bulk
tar -C $STAGE -czf $OUT/res.tar.gz res
[ $SECONDS -lt 330 ] || exit 0
ITERS=30 timeout -k 5 90 $STAGE/bin/cuda-profile $STAGE/large 1x600 4x600 10x600 > $R/prof-base.jsonl 2> $R/prof-base.log
echo "profile own=0 rc=$? at ${SECONDS}s"; replays base
tar -C $STAGE -czf $OUT/res.tar.gz res

#!/usr/bin/env bash
# Session 35 (2026-12-07), on an NVIDIA H200. Built here at 89856ae plus the uncommitted change
# that turns our GEMM kernels on by default for passes of 2,048 tokens or more (committed next),
# with the 89856ae build as the baseline:
#   BASE_BIN=<the 89856ae build of target/release/sys1rust> bench/gpu/carry-cuda.sh --build
# results/gpu was moved out of the working tree while it was carried; the parity reference
# (results/gpu/s19-short-default/call2, same checkpoint sha256) was copied to parity-ref/.
# call1: the GPU tests under the new defaults, `auto` (the ready line's kernel_cache on CUDA),
# and three alternating ab rounds, base (89856ae: our kernels off) against new.
AB_ROUNDS=3 RUNS=30 WRK_SECONDS=4 PARITY_REF=$PWD/parity-ref/answers-upstream-cpu-f32.jsonl \
  bench/gpu/cuda.sh setup checkpoint tests auto ab
# call2, on the same warm machine: the 12 sizes in-process with the new defaults.
RUNS=30 bench/gpu/cuda.sh engine
# call3, on a second H200 machine, at 814b602 (the change committed; `carry-cuda.sh --build`
# again): the harness, with upstream stock and compiled in the same call, compiled given the
# call's remainder (harness-call.sh, not kept in the tree, was):
#   export STAGE=/tmp/sys1cuda
#   bench/gpu/cuda.sh setup checkpoint
#   cp parity-ref/answers-upstream-cpu-f32.jsonl $STAGE/res/
#   RUNS=30 bench/gpu/cuda.sh engine
#   CALL_LIMIT=$((585 - SECONDS)) RUNS=30 bench/gpu/cuda.sh upstream parity
# (answers-upstream-cpu-f32.jsonl is results/gpu/s19-short-default/call2's, not copied again.)
# call2/machine.txt is call 1's record (the machine stayed warm between the two calls).

#!/usr/bin/env bash
# Session 12, call 1: gemm_wg with GeGLU (Wi) and RoPE (Wqkv) in its epilogue, timed against
# the GEMM plus the separate kernel for each short pass (with SYS1_CUDA_GEMM_OWN / OWN=1),
# against the same binary without gemm_wg: per-step times, the fused timings, GPU tests
# (the fused path forced, bit for bit), alternating A/B rounds.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }
for s in 1x150 1x600; do
  RUST_LOG=laya_cuda=debug ITERS=30 timeout -k 5 150 $STAGE/bin/cuda-profile $STAGE/large $s > $R/prof-own-$s.jsonl 2> $R/prof-own-$s.log
  echo "own $s rc $?"
  OWN=0 ITERS=30 timeout -k 5 120 $STAGE/bin/cuda-profile $STAGE/large $s > $R/prof-base-$s.jsonl 2> $R/prof-base-$s.log
  echo "base $s rc $?"
  python3 - $R/prof-base-$s.jsonl $R/prof-own-$s.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:
    for l in open(f):
        d = json.loads(l)
        g = {k: round(v) for k, v in d["steps_us"].items() if not k.startswith("head") and k not in ("copy in", "copy out")}
        print(f.split("/")[-1], d["shape"], "run ms %.3f" % d["run_ms_median"], "gpu us", d["gpu_pass_us"], g)
PY
  strip_ansi < $R/prof-own-$s.log | grep -E "sums against|failed|other bits" | sed -E 's/.*Family \{ out: ([0-9]+), inp: ([0-9]+), kind: ([A-Za-z]+) \}/\1x\2 \3/' | head -12
  strip_ansi < $R/prof-own-$s.log | grep "timed apart and fused" | sed -E 's/.*tokens: ([0-9]+), out: ([0-9]+), inp: ([0-9]+), kind: ([A-Za-z]+) \}/\1 \2x\3 \4/' | head -24
  echo "own taken: $(strip_ansi < $R/prof-own-$s.log | grep -c 'own=true') of $(strip_ansi < $R/prof-own-$s.log | grep -c 'a faster GEMM')"
done
tar -C $STAGE -czf $OUT/res.tar.gz res
bench/gpu/cuda.sh tests
grep -h -E "fused|gemm_wg" $STAGE/res/cuda-tests.log 2>/dev/null | head -20
tar -C $STAGE -czf $OUT/res.tar.gz res
export SYS1_CUDA_GEMM_OWN=1
BASE_ENV=SYS1_CUDA_GEMM_OWN=0 PARITY_REF=$PWD/results/gpu/s19-short-default/call2/answers-upstream-cpu-f32.jsonl \
  WRK_SECONDS=8 AB_ROUNDS=2 RUNS=20 AB_SHAPES=s64_q1,s128_q1,s512_q1,s128_q10 bench/gpu/cuda.sh ab
grep -h "GEMM algorithms chosen" $R/serve-ab-*.log | strip_ansi | sed -E 's/.*(families=.*)/\1/'
tar -C $STAGE -czf $OUT/res.tar.gz res

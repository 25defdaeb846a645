#!/usr/bin/env bash
# Session 12, call 4: the committed tree (eee91d9). GPU tests (the f16 maxima should be
# the earlier sessions' again, rope_pair now spelling out rope_qk's roundings); 1x150 and 1x300
# replays alternating gemm_wg with its fused steps (OWN=1) and without (OWN=0), three rounds;
# then the in-process and served A/B of the same binary, SYS1_CUDA_GEMM_OWN=1 against 0.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }
bench/gpu/cuda.sh tests
tar -C $STAGE -czf $OUT/res.tar.gz res
for round in 1 2 3; do
  for own in 1 0; do
    for s in 1x150 1x300; do
      OWN=$own RUST_LOG=laya_cuda=debug ITERS=50 timeout -k 5 120 $STAGE/bin/cuda-profile $STAGE/large $s > $R/prof-$own-$s-r$round.jsonl 2> $R/prof-$own-$s-r$round.log
    done
  done
done
python3 - $R <<'PY'
import json, sys, glob, collections
t = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/prof-[01]-*.jsonl")):
    own = f.split("/prof-")[1][0]
    for l in open(f):
        d = json.loads(l)
        t[(d["shape"], own)].append(d["run_ms_median"])
for k in sorted(t):
    print("replay", k[0], "own" if k[1] == "1" else "base", " ".join("%.3f" % v for v in t[k]))
PY
for s in 1x150 1x300; do strip_ansi < $R/prof-1-$s-r1.log | grep -E "timed apart and fused" | sed -E 's/.*tokens: ([0-9]+), out: ([0-9]+), inp: ([0-9]+), kind: ([A-Za-z]+) \}/\1 \2x\3 \4/'; done
tar -C $STAGE -czf $OUT/res.tar.gz res
export SYS1_CUDA_GEMM_OWN=1
BASE_ENV=SYS1_CUDA_GEMM_OWN=0 PARITY_REF=$PWD/results/gpu/s19-short-default/call2/answers-upstream-cpu-f32.jsonl \
  WRK_SECONDS=8 AB_ROUNDS=2 RUNS=30 AB_SHAPES=s64_q1,s128_q1,s256_q1,s512_q1 bench/gpu/cuda.sh ab
grep -h "GEMM algorithms chosen" $R/serve-ab-*.log | strip_ansi | sed -E 's/.*(families=.*)/\1/'
tar -C $STAGE -czf $OUT/res.tar.gz res

#!/usr/bin/env bash
# Session 13, call 5: the tree to land (gemm_tma, one persistent 128 x 128 form beside
# gemm_wg's two). The GPU tests; replays with OWN=1 and OWN=0 alternating, with OWN=1's
# per-layer log; the smoke answers served with SYS1_CUDA_GEMM_OWN=1 against 0, and parity.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }
nvidia-smi -L > $R/machine.txt
bench/gpu/cuda.sh tests
grep -h -E "test result|FAILED|panicked|assertion|bit-identical|GEMM families|cuda f16|took it" $R/cuda-tests.log | head -30
tar -C $STAGE -czf $OUT/res.tar.gz res
for round in 1 2; do
  for own in 1 0; do
    OWN=$own RUST_LOG=laya_cuda=debug ITERS=50 timeout -k 5 300 $STAGE/bin/cuda-profile $STAGE/large 1x150 1x600 10x600 \
      > $R/prof-$own-r$round.jsonl 2> $R/prof-$own-r$round.log
    echo "profile own=$own round $round rc=$?"
  done
done
strip_ansi < $R/prof-1-r1.log | grep -E "other bits|failed|panick|faster GEMM|timed apart and fused (192|640|6144)" \
  | sed -E 's/^.*laya_cuda::gemm: //; s/s=Shape \{ tokens: ([0-9]+), out: ([0-9]+), inp: ([0-9]+), kind: ([A-Za-z]+) \}/\1 \2x\3 \4/' | head -60
python3 - $R <<'PY'
import json, sys, glob, collections
t = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/prof-[01]-r*.jsonl")):
    own = f.split("/prof-")[1][0]
    for l in open(f):
        d = json.loads(l)
        t[(d["shape"], own)].append(d["run_ms_median"])
for k in sorted(t):
    print("replay", k[0], "own" if k[1] == "1" else "base", " ".join("%.3f" % v for v in t[k]))
PY
tar -C $STAGE -czf $OUT/res.tar.gz res
export SYS1_CUDA_GEMM_OWN=1
BASE_ENV=SYS1_CUDA_GEMM_OWN=0 PARITY_REF=$PWD/results/gpu/s19-short-default/call2/answers-upstream-cpu-f32.jsonl \
  AB_ROUNDS=0 bench/gpu/cuda.sh ab
tar -C $STAGE -czf $OUT/res.tar.gz res

#!/usr/bin/env bash
# Session 13, call 4: gemm_tma persistent only: 128 x 128 in 4 or 6 stages, 128 x 256 in 4:
# every form's bits and timings per layer
# at 1x150, 4x600 and 10x600 (OWN=1's debug log), replays OWN=1 and OWN=0 alternating.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }
nvidia-smi -L > $R/machine.txt
for round in 1 2; do
  for own in 1 0; do
    OWN=$own RUST_LOG=laya_cuda=debug ITERS=50 timeout -k 5 300 $STAGE/bin/cuda-profile $STAGE/large 4x600 10x600 \
      > $R/prof-$own-r$round.jsonl 2> $R/prof-$own-r$round.log
    echo "profile own=$own round $round rc=$?"
  done
done
strip_ansi < $R/prof-1-r1.log | grep -E "sums against|short pass timed|timed apart and fused|other bits|failed|panick|faster GEMM" \
  | sed -E 's/^.*laya_cuda::gemm: //; s/s=Shape \{ tokens: ([0-9]+), out: ([0-9]+), inp: ([0-9]+), kind: ([A-Za-z]+) \}/\1 \2x\3 \4/; s/family=Family \{ out: ([0-9]+), inp: ([0-9]+), kind: ([A-Za-z]+) \}/\1x\2 \3/' \
  | grep -v -E "^short pass timed (16|32|64|128) " | head -150
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

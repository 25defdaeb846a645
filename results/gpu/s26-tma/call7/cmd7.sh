#!/usr/bin/env bash
# Session 13, call 7: Nsight Compute (call 6) found gemm_tma 128 x 128 bound by L2 traffic
# (L2 65% busy, 94.7% hits, tensor pipe 48.7%). A 192 x 128 form (three consumer
# warpgroups) reads each weight tile a third fewer times: its bits and per-layer timings at
# 1x600, 4x600 and 10x600 beside the other forms (OWN=1's debug log), replays OWN=1/OWN=0.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }
nvidia-smi -L > $R/machine.txt
for own in 1 0; do
  OWN=$own RUST_LOG=laya_cuda=debug ITERS=50 timeout -k 5 150 $STAGE/bin/cuda-profile $STAGE/large 1x600 4x600 10x600 \
    > $R/prof-$own-r1.jsonl 2> $R/prof-$own-r1.log
  echo "profile own=$own rc=$?"
done
strip_ansi < $R/prof-1-r1.log | grep -E "other bits|failed|panick|faster GEMM|short pass timed (640|2560|6144)|timed apart and fused (640|2560|6144)" \
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

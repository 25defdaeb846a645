#!/usr/bin/env bash
# Session 15, call 2: attention_wg as landed (the serial form; the overlapped one taken out)
# against attention_mma: per-step times, the GPU tests, and `ab` (SYS1_CUDA_ATTENTION=flash against =mma).
# Per-step GPU times with each (cuda-profile, ATTENTION=mma for the old kernel), then the GPU
# tests (f16 rule, batch mates, attention_wg against attention_mma and the rows reference),
# then, only if they pass, `ab` with SYS1_CUDA_ATTENTION=flash (attention_wg) against =mma.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
nvidia-smi -L > $R/machine.txt
for a in wg mma; do
  ATTENTION=$a ITERS=50 timeout -k 5 120 $STAGE/bin/cuda-profile $STAGE/large 1x150 1x600 4x600 10x600 \
    > $R/prof-$a.jsonl 2> $R/prof-$a.log
  echo "profile $a rc=$?"
done
python3 - "$R" <<'PY'
import json, sys
r = sys.argv[1]
for a in ("wg", "mma"):
    try:
        for l in open(f"{r}/prof-{a}.jsonl"):
            d = json.loads(l); s = d["steps_us"]
            print(a, d["shape"], "run", round(d["run_ms_median"], 3), "global", s.get("attention global"), "sliding", s.get("attention sliding"), "head", s.get("head attention"))
    except Exception as e:
        print(a, "no profile:", e)
PY
tar -C $STAGE -czf $OUT/res.tar.gz res
bench/gpu/cuda.sh tests
grep -h -E "test result|FAILED|panicked|assertion|bit-identical|cuda f16|passes;" $R/cuda-tests.log | head -30
tar -C $STAGE -czf $OUT/res.tar.gz res
grep -q "test result: ok" $R/cuda-tests.log && ! grep -q "FAILED" $R/cuda-tests.log || { echo "tests failed: no ab"; exit 1; }
export SYS1_CUDA_ATTENTION=flash
BASE_ENV=SYS1_CUDA_ATTENTION=mma PARITY_REF=$PWD/results/gpu/s19-short-default/call2/answers-upstream-cpu-f32.jsonl \
  AB_ROUNDS=2 bench/gpu/cuda.sh ab
tar -C $STAGE -czf $OUT/res.tar.gz res

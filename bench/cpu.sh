#!/usr/bin/env bash
# CPU benchmark: sys1rust (MLX CPU backend, f32 and --int8) next to upstream laya 0.4.15 (PyTorch
# fp32 CPU) on the same `large` random-weight checkpoint (the real typed-decisions shapes), in one
# run.
#
#   bench/cpu.sh [--runs N] [--rounds R] [--shapes s128_q1,s512_q10]
#
# The contenders take turns: R rounds (default 3), each running every contender for N runs
# (each round starting with the next one), so that a slower minute of this shared machine
# falls on all of them; the write-up gives the median of the rounds' medians and each round's
# ratio.
#
# Needs: scripts/setup-mlx.sh done; the oracle venv (shared/oracle/setup_venv.sh) for upstream.
# Writes results/cpu-run.md (machine, commit, command, numbers; results/CPU.md carries it above its
# history) and each round's reports, results/cpu-rounds/*.json.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUNS=5
ROUNDS=3
SHAPES=s128_q1,s512_q10
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$ROUNDS" in ''|*[!0-9]*|0) echo "--rounds takes a count of 1 or more" >&2; exit 2 ;; esac
SHARED=${SYS1_SHARED:-$ROOT/../shared}
VENV=${ORACLE_VENV:-$ROOT/../.oracle-venv}
WORKLOAD=$SHARED/seed-workloads/smoke.jsonl
CKPT=${LARGE_CHECKPOINT:-$ROOT/target/bench/large}

cargo build --release -q -p sys1rust -p laya-mlx --examples
if [ ! -f "$CKPT/model.safetensors" ]; then
  echo "writing the large random-weight checkpoint to $CKPT" >&2
  cargo run --release -q -p laya-mlx --example make-checkpoint -- \
    --preset large --configs "$SHARED/fixtures" \
    --seed 4242 --out "$CKPT"
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "no oracle venv at $VENV: upstream not measured" >&2
fi
OUTR=results/cpu-rounds
rm -rf "$OUTR" results/cpu-sys1rust.json results/cpu-sys1rust-int8.json results/cpu-upstream.json
mkdir -p "$OUTR"
contenders=(sys1rust sys1rust-int8)
[ -x "$VENV/bin/python" ] && contenders+=(upstream)
run_contender() { # name round
  echo "round $2 of $ROUNDS: $1 ..." >&2
  case $1 in
    sys1rust)
      target/release/sys1rust bench --model "$CKPT" --workload "$WORKLOAD" --shapes "$SHAPES" --runs "$RUNS" ;;
    sys1rust-int8)
      target/release/sys1rust bench --model "$CKPT" --workload "$WORKLOAD" --shapes "$SHAPES" --runs "$RUNS" --int8 \
        | python3 -c 'import json, sys; r = json.load(sys.stdin); r["contender"] = "sys1rust --int8"; print(json.dumps(r))' ;;
    upstream)
      OMP_NUM_THREADS=$(nproc) "$VENV/bin/python" bench/upstream_cpu.py --model "$CKPT" --workload "$WORKLOAD" \
        --shapes "$SHAPES" --runs "$RUNS" ;;
  esac > "$OUTR/$1-$2.json"
}
reports=()
n=${#contenders[@]}
for r in $(seq 1 "$ROUNDS"); do
  # Each round starts with the next contender, so that no one always runs first or last.
  for i in $(seq 0 $((n - 1))); do
    name=${contenders[$(((i + r - 1) % n))]}
    run_contender "$name" "$r"
    reports+=("$OUTR/$name-$r.json")
  done
done
# The run's report; results/CPU.md carries it at its top, above the history of earlier runs.
python3 bench/report.py --title "CPU: sys1rust (MLX CPU) vs upstream laya 0.4.15 (PyTorch fp32)" \
  --command "bench/cpu.sh --runs $RUNS --rounds $ROUNDS --shapes $SHAPES" "${reports[@]}" > results/cpu-run.md
cat results/cpu-run.md

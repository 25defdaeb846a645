#!/usr/bin/env bash
# Runs jevcompat (PyPI) against `sys1rust serve` and against upstream laya-serve 0.4.15 in the
# same five configurations, writing results/jevcompat-<name>.{txt,json} (and .md for sys1rust).
# Needs: target/release/sys1rust, jevcompat from scripts/setup-jev.sh (target/jev-venv) and,
# for upstream, the oracle venv (../.oracle-venv, shared/oracle/setup_venv.sh).
# Usage: results/jevcompat-run.sh [sys1rust]   (from the repository root; about 3 minutes;
#        `sys1rust` runs only sys1rust's configurations)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CKPT=$ROOT/crates/laya-fixtures/data/checkpoints/tiny
JEV=$(dirname "$(bash scripts/setup-jev.sh)")/jevcompat
UPSTREAM_PY=$(cd .. && pwd)/.oracle-venv/bin/python
OUT=results

wait_up() {  # port
  for _ in $(seq 1 300); do
    curl -s -o /dev/null "http://127.0.0.1:$1/health" && return 0
    sleep 0.2
  done
  return 1
}

run() {  # name port [jevcompat args...]
  local name=$1 port=$2
  shift 2
  "$JEV" test "http://127.0.0.1:$port" "$@" --json "$OUT/jevcompat-$name.json" --markdown "$OUT/jevcompat-$name.md" \
    --title "jevcompat: $name" > "$OUT/jevcompat-$name.txt" 2>&1
  echo "$name: exit $? -- $(tail -n 3 "$OUT/jevcompat-$name.txt" | grep -E 'conformant|incomplete|not tested')"
}

sys1() {  # name port jevcompat-args -- serve-args
  local name=$1 port=$2 jargs=$3
  shift 3
  RUST_LOG=warn "$ROOT/target/release/sys1rust" serve --model "$CKPT" --port "$port" "$@" > /dev/null 2>&1 &
  local pid=$!
  wait_up "$port" && run "$name" "$port" $jargs
  kill "$pid"; wait "$pid" 2> /dev/null
}

upstream() {  # name port jevcompat-args env...
  local name=$1 port=$2 jargs=$3
  shift 3
  # The reference environment of shared/oracle/README.md ("Server environment used by
  # make_references.py"), all three names on the tiny checkpoint, cwd = its parent.
  (cd "$(dirname "$CKPT")" && exec env -i PATH=/usr/bin:/bin HOME="${TMPDIR:-/tmp}" LANG=C.UTF-8 LC_ALL=C.UTF-8 \
    LAYA_HOST=127.0.0.1 LAYA_PORT="$port" LAYA_DEVICE=cpu LAYA_THREADS=1 LAYA_PRELOAD=1 LAYA_LOG_LEVEL=warning \
    LAYA_EXTRA_MODELS='{"english": "tiny", "multilingual": "tiny", "typed-decisions": "tiny"}' \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1 \
    MKL_NUM_THREADS=1 PYTHONHASHSEED=0 "$@" "$UPSTREAM_PY" -m laya.serve > /dev/null 2>&1) &
  local pid=$!
  wait_up "$port" && run "upstream-$name" "$port" $jargs
  kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null
}

"$JEV" --version
sys1 strict 18810 "--key s3cret" --jev-strict --api-key s3cret
sys1 strict-nokey 18811 "" --jev-strict
sys1 strict-notournament 18812 "" --jev-strict --tournament-group 0
sys1 default 18813 ""
sys1 default-tournament 18814 "" --tournament-group 16
[ "${1:-}" = sys1rust ] && exit 0
upstream strict 18820 "--key s3cret" LAYA_JEV_STRICT=1 LAYA_TOURNAMENT_GROUP=16 LAYA_API_KEY=s3cret
upstream strict-nokey 18821 "" LAYA_JEV_STRICT=1 LAYA_TOURNAMENT_GROUP=16
upstream strict-notournament 18822 "" LAYA_JEV_STRICT=1
upstream default 18823 ""
upstream default-tournament 18824 "" LAYA_TOURNAMENT_GROUP=16

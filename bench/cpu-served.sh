#!/usr/bin/env bash
# Served throughput on the CPU: `sys1rust serve` on the `large` random-weight checkpoint with
# queued requests sharing forward passes (the default `--batch-tokens`) against each request
# alone (`--batch-tokens 0`), under Debian's `wrk` (bench/gpu/wrk.lua), in alternating rounds
# so that a slower minute of this shared machine falls on both.
#
#   bench/cpu-served.sh [--rounds R] [--seconds S] [--clients C] [--shapes s32_q1,s128_q1]
#
# Shapes name the request bodies of the committed workloads (s32_* from short.jsonl, the
# rest from smoke.jsonl). Writes results/cpu-served/<shape>-<mode>-<round>.json (wrk's line)
# and results/cpu-served.md (machine, commit, command, medians of the rounds).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3
SECONDS_EACH=25
CLIENTS=16
SHAPES=s32_q1,s128_q1
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECONDS_EACH=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v wrk >/dev/null || { echo "bench/cpu-served.sh: needs wrk (apt-get install wrk)" >&2; exit 1; }
FIX=crates/laya-fixtures/data
CKPT=${LARGE_CHECKPOINT:-target/bench/large}
OUTD=results/cpu-served
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

cargo build --release -q -p sys1rust -p laya-mlx --examples
if [ ! -f "$CKPT/model.safetensors" ]; then
  echo "writing the large random-weight checkpoint to $CKPT" >&2
  target/release/examples/make-checkpoint --preset large --configs "$FIX" --seed 4242 --out "$CKPT"
fi
rm -rf "$OUTD" && mkdir -p "$OUTD"

# One request body a line, for wrk.lua.
bodies() { # shape out
  local src=$FIX/workloads/smoke.jsonl
  case $1 in s32_*) src=$FIX/workloads/short.jsonl ;; esac
  python3 bench/bodies.py "$src" "$1" "$2"
}

run() { # shape mode round
  local args=()
  [ "$2" = alone ] && args=(--batch-tokens 0)
  target/release/sys1rust serve --model "$CKPT" --port 0 "${args[@]}" > "$WORK/ready" 2> "$WORK/serve.log" &
  local pid=$! addr=""
  for _ in $(seq 1 600); do [ -s "$WORK/ready" ] && break; sleep 0.1; done
  addr=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["address"])' "$WORK/ready")
  WRK_BODIES="$WORK/$1.jsonl" wrk -t "$((CLIENTS < 4 ? CLIENTS : 4))" -c "$CLIENTS" -d "${SECONDS_EACH}s" \
    --timeout 120s -s bench/gpu/wrk.lua "http://$addr" | tail -n 1 > "$OUTD/$1-$2-$3.json"
  kill -TERM "$pid" && wait "$pid"
  echo "$1 $2 round $3: $(cat "$OUTD/$1-$2-$3.json")" >&2
}

IFS=, read -r -a shapes <<< "$SHAPES"
for shape in "${shapes[@]}"; do
  bodies "$shape" "$WORK/$shape.jsonl"
done
for r in $(seq 1 "$ROUNDS"); do
  # Each round starts with the other mode.
  modes=(alone shared)
  [ $((r % 2)) = 0 ] && modes=(shared alone)
  for shape in "${shapes[@]}"; do
    for mode in "${modes[@]}"; do
      run "$shape" "$mode" "$r"
    done
  done
done

python3 - "$OUTD" "$ROUNDS" "$CLIENTS" "$SECONDS_EACH" "$SHAPES" > results/cpu-served.md <<'EOF'
import json, os, platform, statistics, subprocess, sys
outd, rounds, clients, seconds, shapes = sys.argv[1:]
rounds = int(rounds)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
print("# CPU served: queued requests sharing passes against each alone\n")
print(f"- machine: {cpu}, {os.cpu_count()} cores, {platform.platform()}")
print(f"- commit: {commit}{' (with uncommitted changes)' if dirty else ''}")
print(f"- command: `bench/cpu-served.sh --rounds {rounds} --seconds {seconds} --clients {clients} --shapes {shapes}`")
print(f"- load: `wrk` at {clients} clients for {seconds} s a round; medians of the rounds\n")
print("| shape | alone requests/s | shared requests/s | shared / alone | alone p50 / p99 ms | shared p50 / p99 ms |")
print("|---|---|---|---|---|---|")
for shape in shapes.split(","):
    row = {}
    for mode in ("alone", "shared"):
        runs = [json.load(open(f"{outd}/{shape}-{mode}-{r}.json")) for r in range(1, rounds + 1)]
        row[mode] = {k: statistics.median(run[k] for run in runs) for k in ("rps", "p50_ms", "p99_ms")}
        row[mode]["rounds"] = [run["rps"] for run in runs]
        row[mode]["non200"] = sum(run["non200"] + run["socket_errors"] for run in runs)
    a, s = row["alone"], row["shared"]
    print(f"| {shape} | {a['rps']:.1f} ({', '.join(map(str, a['rounds']))}) | {s['rps']:.1f} "
          f"({', '.join(map(str, s['rounds']))}) | {s['rps'] / a['rps']:.2f}x | {a['p50_ms']:.0f} / {a['p99_ms']:.0f} "
          f"| {s['p50_ms']:.0f} / {s['p99_ms']:.0f} |")
    if a["non200"] or s["non200"]:
        print(f"\n{shape}: {a['non200']} / {s['non200']} answers not 200 or socket errors")
EOF
cat results/cpu-served.md

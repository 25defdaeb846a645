#!/usr/bin/env bash
# The CUDA engine's harness on the GPU machine, from the repository root, over what
# bench/gpu/carry-cuda.sh staged in .carry/cuda (binaries built against the CPU MLX wheel:
# `--engine cuda` needs no MLX GPU backend). Phases run in the order given, e.g.
#
#   bench/gpu/cuda.sh setup checkpoint tests shutdowns engine served upstream parity
#
#   setup       unpack into $STAGE (default /tmp/sys1cuda), install upstream's wheel
#   checkpoint  the `large` random checkpoint (seed 4242) in $STAGE/large
#   tests       laya-cuda's GPU tests: fixture references in f16, determinism, graphs, and
#               every request bit-identical alone and among random batch mates (large too)
#   replay      the fixture references over the served app on the CUDA engine (f16 rule), and
#               the router's references with the three fixture checkpoints (SYS1_ROUTER_F16)
#   shutdowns   SHUTDOWNS (50) SIGTERM shutdowns of `serve --engine cuda`, idle and with
#               requests in flight: every one must exit 0 with every request answered
#   engine      `sys1rust bench --engine cuda` in-process: the 12 sizes, RUNS runs each
#   host        `decide-host`: the host's share of a decision (routing, tokenization, layout,
#               decoding; no model) on this machine's CPU, for HOST_SHAPES (default s64_q1
#               s128_q1 s256_q1 s512_q1 s512_q4 s512_q10; HOST_RUNS runs each, 2000)
#   served      `serve --engine cuda` over HTTP: answers of smoke (for parity), the 12 sizes,
#               then wrk (carried) for WRK_SECONDS: s32_q1 at 16 clients (defaults), s32_q1 at
#               64 clients (--max-concurrent 64), s512_q10 at 16 clients; and the same with
#               --batch-tokens 0 (one request a pass) for comparison (SERVED_ALONE=0: not)
#   workers     two engine workers on the one GPU (--gpus 0,0) against one (--gpus 0): smoke's
#               answers byte for byte (idle workers take turns, so both answer), and the
#               served loads of `served`
#   auto        `serve` with the engine left at its default (auto) and with `--engine cuda`:
#               auto must find the GPU once (one "NVIDIA GPU found" line), its ready line must say
#               cuda, and smoke's answers must be byte for byte the same
#   profile     the worker's batch sizes and times under the s32_q1 and s512_q10 loads
#   variants    `engine` and the served load with the GEMM algorithms picked at each of
#               GEMM_VARIANTS token counts (SYS1_CUDA_GEMM_TOKENS; `T/L` also sets the long
#               passes' count, SYS1_CUDA_GEMM_LARGE_TOKENS, 0 for none)
#   settings    this tree's binary under each of SETTINGS: smoke's answers compared, and
#               in-process AB_SHAPES in alternating rounds (AB_ROUNDS)
#   ab          the carried baseline binary (bin/sys1rust-base, see carry-cuda.sh; or with
#               BASE_ENV this tree's binary under those settings, below) against this tree's in
#               alternating rounds (AB_ROUNDS, 3): in-process AB_SHAPES and wrk with
#               s32_q1 and s512_q10 at 16 clients, so a change is judged against what it
#               replaces on the same machine in the same call. First, smoke's answers served
#               by each (and by bin/sys1rust-mid, an intermediate build, when carried),
#               compared with the baseline's byte for byte and, with PARITY_REF (upstream
#               cpu-f32 answers for this very checkpoint, its sha256 file beside it), run
#               through `parity`
#   steps       `cuda-profile`'s GPU time of every step (STEP_SHAPES) for this tree and, when
#               carried, the baseline's; then Nsight Compute's counters for the attention
#               kernels of one 10x600 pass (NCU_KERNELS launches; NCU=0: not)
#   router      GPU memory with three `large` resident, the latency of a reload after eviction
#   upstream    upstream laya 0.4.15 in-process: cpu-f32 answers (the parity reference),
#               cuda-stock, then cuda-compile within what is left of CALL_LIMIT
#   parity      every contender's answers against upstream cpu-f32
#
# Results go to $STAGE/res and are packed into $OUT/res.tar.gz after every phase.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
ROOT=$(pwd)
STAGE=${STAGE:-/tmp/sys1cuda}
RES=$STAGE/res
OUT=${OUT:-$ROOT/target/gpu-out}
RUNS=${RUNS:-50}
WARMUP=${WARMUP:-5}
WRK_SECONDS=${WRK_SECONDS:-10}
SHUTDOWNS=${SHUTDOWNS:-50}
CALL_LIMIT=${CALL_LIMIT:-570}
SHAPES=${SHAPES:-s64_q1,s64_q4,s64_q10,s128_q1,s128_q4,s128_q10,s256_q1,s256_q4,s256_q10,s512_q1,s512_q4,s512_q10}
FIX=$ROOT/crates/laya-fixtures/data
SMOKE=$FIX/workloads/smoke.jsonl
SHORT=$FIX/workloads/short.jsonl
CKPT=$STAGE/large
SYS1=$STAGE/bin/sys1rust
mkdir -p "$STAGE" "$RES" "$OUT"
export LD_LIBRARY_PATH=$STAGE/lib:$STAGE/wrk:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$STAGE/py${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export SYS1_FIXTURES=$FIX

say() { printf '[cuda.sh %(%H:%M:%S)T +%ss] %s\n' -1 "$SECONDS" "$*" >&2; }
pack() { tar -C "$STAGE" -czf "$OUT/res.tar.gz" res 2>/dev/null; }

phase_setup() {
  if [ ! -x "$SYS1" ]; then
    tar -C "$STAGE" -xJf "$ROOT/.carry/cuda/bundle.tar.xz" || { say "no bundle"; exit 3; }
  fi
  # The test binaries start the server at the path baked in when they were built.
  local baked
  baked=$(cat "$STAGE/bin/sys1rust.bin-path")
  [ -e "$baked" ] || { mkdir -p "$(dirname "$baked")" && ln -sf "$SYS1" "$baked"; }
  if [ ! -d "$STAGE/py/laya" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$STAGE/py" \
      "$STAGE"/whl/laya-*.whl
  fi
  {
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
    nproc; free -g | head -2; uname -r
    python3 -c 'import torch; print("torch", torch.__version__)'
    ldd "$SYS1" | grep -E 'not found|mlx'
    "$SYS1" --version
  } > "$RES/machine.txt" 2>&1
  cat "$RES/machine.txt" >&2
}

phase_checkpoint() {
  if [ ! -f "$CKPT/model.safetensors" ]; then
    "$STAGE/bin/make-checkpoint" --preset large --seed 4242 --out "$CKPT" --configs "$FIX" \
      > "$RES/checkpoint.json" || say "checkpoint failed"
  fi
  sha256sum "$CKPT/model.safetensors" > "$RES/checkpoint.sha256"
}

phase_tests() {
  say "laya-cuda GPU tests"
  LAYA_CUDA_LARGE=$CKPT timeout -k 5 300 "$STAGE/bin/cuda-tests" --nocapture --test-threads 1 \
    > "$RES/cuda-tests.log" 2>&1
  say "cuda tests rc $?"
  grep -E "^test |running on|skipped|cuda f16|compositions|passes;|panicked|error" "$RES/cuda-tests.log" | head -n 40 >&2
  pack
}

phase_replay() {
  say "replay: fixture references served on the CUDA engine"
  timeout -k 5 200 "$STAGE/bin/sys1rust-tests" --exact replay::replay_f16_within_tolerance --nocapture \
    > "$RES/replay-f16.log" 2>&1
  say "replay rc $?"
  tail -n 4 "$RES/replay-f16.log" >&2
  say "router references on the GPU"
  SYS1_ROUTER_F16=1 timeout -k 5 200 "$STAGE/bin/sys1rust-tests" \
    --exact router::every_router_configuration_answers_as_upstream --nocapture > "$RES/router-f16.log" 2>&1
  say "router rc $?"
  grep -E "router |test result|panicked" "$RES/router-f16.log" | head -n 12 >&2
  pack
}

phase_shutdowns() {
  say "$SHUTDOWNS shutdowns"
  timeout -k 5 400 python3 "$ROOT/bench/gpu/shutdowns.py" --count "$SHUTDOWNS" \
    --cmd "$SYS1 serve --model $FIX/checkpoints/tiny --engine cuda --port 0 --kernel-cache $STAGE/kc-tiny" \
    > "$RES/shutdowns.json" 2> "$RES/shutdowns.log"
  say "shutdowns rc $?"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("exit codes", d["exit_codes"], "all ok", d["all_exit_0_and_answered"], "max exit s", d["max_exit_s"])' \
    "$RES/shutdowns.json" >&2
  pack
}

phase_engine() {
  say "in-process bench"
  timeout -k 5 200 "$SYS1" bench --model "$CKPT" --engine cuda --workload "$SMOKE" --shapes "$SHAPES" \
    --runs "$RUNS" --warmup "$WARMUP" > "$RES/sys1rust-cuda-inproc.json" 2> "$RES/sys1rust-cuda-inproc.log"
  say "in-process rc $?"
  pack
}

phase_host() {
  # shellcheck disable=SC2086 # HOST_SHAPES is a list of shape names
  RUNS=${HOST_RUNS:-2000} timeout -k 5 120 "$STAGE/bin/decide-host" \
    ${HOST_SHAPES:-s64_q1 s128_q1 s256_q1 s512_q1 s512_q4 s512_q10} > "$RES/decide-host.jsonl" 2> "$RES/decide-host.log"
  say "decide-host rc $?: $(tr '\n' ' ' < "$RES/decide-host.jsonl")"
  pack
}

wrk_run() { # name bodies clients
  local name=$1 bodies=$2 clients=$3 threads=8
  [ "$clients" -lt $threads ] && threads=$clients
  WRK_BODIES=$bodies timeout -k 5 $((WRK_SECONDS + 30)) "$STAGE/wrk/wrk" -t "$threads" -c "$clients" \
    -d "${WRK_SECONDS}s" --timeout 30s -s "$ROOT/bench/gpu/wrk.lua" "http://$ADDR" 2>&1 |
    tail -n 1 > "$RES/wrk-$name.json"
  say "wrk $name: $(cat "$RES/wrk-$name.json")"
}

# Request bodies of one shape of a workload, one per line.
bodies() { # workload prefix out
  python3 "$ROOT/bench/bodies.py" "$@"
}

# Starts `serve --engine cuda` on the large checkpoint in the background: SERVE_PID, ADDR.
serve_bg() { # label extra-args...
  local label=$1; shift
  rm -f "$STAGE/ready-$label"
  "$SYS1" serve --model "$CKPT" --engine cuda --port 0 "$@" > "$STAGE/ready-$label" 2> "$RES/serve-$label.log" &
  SERVE_PID=$!
  for _ in $(seq 1 600); do [ -s "$STAGE/ready-$label" ] && break; sleep 0.1; done
  ADDR=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["address"])' "$STAGE/ready-$label")
}

stop_bg() {
  kill -TERM "$SERVE_PID" 2>/dev/null
  wait "$SERVE_PID"
  say "server exited $?"
}

# The server's own view of a load (its request log's total_ms), to set beside wrk's: requests
# of fewer than 1,000 tokens and of more, each with its count, p50, p99 and max.
server_latency() { # label
  awk '/ request method=POST/ {
      t = ""; n = 0
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^total_ms=/) t = substr($i, 10)
        if ($i ~ /^input_tokens=/) n = substr($i, 14)
      }
      if (t != "") print (n + 0 < 1000 ? "short" : "long"), t
    }' "$RES/serve-$1.log" | sort -k1,1 -k2n | awk '
    function rank(p,  i) { i = int(c * p); if (i < c * p) i++; return i < 1 ? 1 : i }
    function report() { if (c) printf "%s n=%d p50=%s p99=%s max=%s  ", k, c, v[rank(0.5)], v[rank(0.99)], v[c] }
    $1 != k { report(); k = $1; c = 0 }
    { v[++c] = $2 }
    END { report(); print "" }'
}

phase_served() {
  bodies "$SHORT" s32_q1 "$STAGE/s32_q1.jsonl"
  bodies "$SMOKE" s512_q10 "$STAGE/s512_q10.jsonl"
  say "served: answers and the 12 sizes"
  timeout -k 5 240 python3 "$ROOT/bench/gpu/served.py" --name sys1rust-cuda-http \
    --cmd "$SYS1 serve --model $CKPT --engine cuda --port 0" --workload "$SMOKE" \
    --answers "$RES/answers-sys1rust-cuda.jsonl" --shapes "$SHAPES" --runs "$RUNS" --warmup "$WARMUP" \
    --log "$RES/sys1rust-cuda-http.log" > "$RES/sys1rust-cuda-http.json"
  say "served rc $?"
  load_runs shared
  [ "${SERVED_ALONE:-1}" = 1 ] && load_runs alone --batch-tokens 0
  pack
}

# wrk runs against `serve --engine cuda` on large: s32_q1 and s512_q10 at 16 clients (default
# admission), s32_q1 at 64 clients (--max-concurrent 64). `label` names the result files.
load_runs() { # label extra-args...
  local label=$1; shift
  [ -f "$STAGE/s32_q1.jsonl" ] || bodies "$SHORT" s32_q1 "$STAGE/s32_q1.jsonl"
  [ -f "$STAGE/s512_q10.jsonl" ] || bodies "$SMOKE" s512_q10 "$STAGE/s512_q10.jsonl"
  serve_bg "$label-16" "$@"
  wrk_run "$label-s32_q1-c16" "$STAGE/s32_q1.jsonl" 16
  wrk_run "$label-s512_q10-c16" "$STAGE/s512_q10.jsonl" 16
  stop_bg
  serve_bg "$label-64" --max-concurrent 64 "$@"
  wrk_run "$label-s32_q1-c64" "$STAGE/s32_q1.jsonl" 64
  stop_bg
}

# Two answer files of served.py, request by request: status and body byte for byte.
compare_answers() { # a b
  python3 - "$@" <<'EOF'
import json, sys
one, two = ([(d["id"], d["status"], json.dumps(d["result"])) for d in map(json.loads, open(p))] for p in sys.argv[1:])
print(json.dumps({"requests": len(one), "identical": one == two,
                  "differing": [a[0] for a, b in zip(one, two) if a != b]}))
EOF
}

# smoke's answers from `$SYS1 serve` on large with the given arguments, request by request,
# into answers-NAME.jsonl (served.py's report NAME.json and the server's log NAME.log beside).
smoke_answers() { # name serve-args...
  local name=$1
  shift
  timeout -k 5 200 python3 "$ROOT/bench/gpu/served.py" --name "$name" \
    --cmd "$SYS1 serve --model $CKPT --port 0 $*" --workload "$SMOKE" \
    --answers "$RES/answers-$name.jsonl" --shapes s64_q1 --runs 3 --warmup 1 \
    --log "$RES/$name.log" > "$RES/$name.json"
}

phase_workers() {
  local g
  for g in 0 0,0; do
    say "answers with --gpus $g"
    smoke_answers "workers-$g" --engine cuda --gpus "$g"
  done
  compare_answers "$RES/answers-workers-0.jsonl" "$RES/answers-workers-0,0.jsonl" > "$RES/workers-compare.json"
  say "workers: $(cat "$RES/workers-compare.json")"
  load_runs gpus-0 --gpus 0
  load_runs gpus-00 --gpus 0,0
  pack
}

phase_auto() {
  say "answers with the engine left at auto, then with --engine cuda"
  smoke_answers engine-auto
  smoke_answers engine-cuda --engine cuda
  compare_answers "$RES/answers-engine-cuda.jsonl" "$RES/answers-engine-auto.jsonl" > "$RES/auto-compare.json"
  say "auto against cuda: $(cat "$RES/auto-compare.json"); \"NVIDIA GPU found\" lines: $(grep -c 'NVIDIA GPU found' "$RES/engine-auto.log"); auto's engine: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ready"]["engine"])' "$RES/engine-auto.json")"
  pack
}

# Where served time goes with shared passes: the worker's debug events (laya-core's
# "decided together" and "shared pass") during the s32_q1 and s512_q10 loads at 16 clients,
# summarised by bench/gpu/profile_served.py.
phase_profile() {
  [ -f "$STAGE/s32_q1.jsonl" ] || bodies "$SHORT" s32_q1 "$STAGE/s32_q1.jsonl"
  [ -f "$STAGE/s512_q10.jsonl" ] || bodies "$SMOKE" s512_q10 "$STAGE/s512_q10.jsonl"
  local shape
  for shape in s32_q1 s512_q10; do
    RUST_LOG=warn,laya_core::decide=debug serve_bg "profile-$shape" --log-format json
    wrk_run "profile-$shape-c16" "$STAGE/$shape.jsonl" 16
    stop_bg
    python3 "$ROOT/bench/gpu/profile_served.py" "$RES/serve-profile-$shape.log" "$RES/wrk-profile-$shape-c16.json" \
      > "$RES/profile-$shape.json"
    say "profile $shape: $(cat "$RES/profile-$shape.json")"
  done
  pack
}

# The GEMM algorithm every pass uses is the heuristic's pick for GEMM_TOKENS tokens: the
# in-process sizes and the served load under each of GEMM_VARIANTS.
GEMM_VARIANTS=${GEMM_VARIANTS:-"128 2048 8192"}
phase_variants() {
  local v t l name
  for v in $GEMM_VARIANTS; do
    # `T` or `T/L`: GEMM algorithms picked at T tokens, and at L (comma-separated; 0: none)
    # for long passes (without /L, the binary's default).
    t=${v%%/*} l=
    [ "$v" != "$t" ] && l=${v#*/}
    name="g$t${l:+-l${l//,/+}}"
    say "GEMM algorithms picked at $t tokens, long passes at ${l:-the default}"
    env SYS1_CUDA_GEMM_TOKENS="$t" ${l:+SYS1_CUDA_GEMM_LARGE_TOKENS=$l} timeout -k 5 200 "$SYS1" bench --model "$CKPT" \
      --engine cuda --workload "$SMOKE" --shapes "$SHAPES" --runs "$RUNS" --warmup "$WARMUP" \
      > "$RES/sys1rust-cuda-inproc-$name.json" 2> "$RES/sys1rust-cuda-inproc-$name.log"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join("%s:%.2f" % (s["shape"], s["median_ms"]) for s in d["shapes"]))' \
      "$RES/sys1rust-cuda-inproc-$name.json" >&2
    (
      export SYS1_CUDA_GEMM_TOKENS=$t
      if [ -n "$l" ]; then export SYS1_CUDA_GEMM_LARGE_TOKENS=$l; fi
      load_runs "$name"
    )
    pack
  done
}

AB_ROUNDS=${AB_ROUNDS:-3}
AB_SHAPES=${AB_SHAPES:-s128_q1,s512_q1,s256_q10,s512_q10}

# This tree's binary under each of SETTINGS (`|`-separated sets of NAME=VALUE, e.g.
# "SYS1_CUDA_PDL=0|SYS1_CUDA_PDL=1"): smoke's answers served under each, compared byte for
# byte with the first's, then AB_ROUNDS rounds of in-process AB_SHAPES taking the settings in
# turn, so that they share the machine's drift. Results: settings-N-*.
phase_settings() {
  local i r
  local -a sets
  IFS='|' read -r -a sets <<< "${SETTINGS:?SETTINGS: |-separated sets of NAME=VALUE}"
  for i in "${!sets[@]}"; do
    say "settings $i: ${sets[$i]}"
    # shellcheck disable=SC2086 # one NAME=VALUE a word
    (export ${sets[$i]}; smoke_answers "settings-$i" --engine cuda)
    [ "$i" = 0 ] && continue
    compare_answers "$RES/answers-settings-0.jsonl" "$RES/answers-settings-$i.jsonl" > "$RES/settings-compare-$i.json"
    say "settings $i answers against settings 0: $(cat "$RES/settings-compare-$i.json")"
  done
  for r in $(seq 1 "$AB_ROUNDS"); do
    for i in "${!sets[@]}"; do
      # shellcheck disable=SC2086
      env ${sets[$i]} timeout -k 5 200 "$SYS1" bench --model "$CKPT" --engine cuda --workload "$SMOKE" \
        --shapes "$AB_SHAPES" --runs "$RUNS" --warmup "$WARMUP" \
        > "$RES/settings-$i-$r.json" 2> "$RES/settings-$i-$r.log"
      say "settings $i round $r: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join("%s:%.2f" % (s["shape"], s["median_ms"]) for s in d["shapes"]))' "$RES/settings-$i-$r.json")"
    done
    pack
  done
}
# The binary `ab` calls `name`: this tree's (new) or a carried one (base, mid).
# BASE_ENV: the baseline is this tree's binary under those settings (a wrapper beside it, so
# a carried bin/sys1rust-base is left alone), for a change that a setting switches. With the
# setting exported for `new`: SYS1_CUDA_GEMM_SMALL_TOKENS=1024 BASE_ENV=SYS1_CUDA_GEMM_SMALL_TOKENS=0.
ab_bin() { # name
  if [ "$1" = new ]; then
    echo "$STAGE/bin/sys1rust"
  elif [ "$1" = base ] && [ -n "${BASE_ENV:-}" ]; then
    echo "$STAGE/bin/sys1rust-base-env"
  else
    echo "$STAGE/bin/sys1rust-$1"
  fi
}
base_from_env() {
  [ -n "${BASE_ENV:-}" ] || return 0
  printf '#!/bin/sh\nexec env %s %s "$@"\n' "$BASE_ENV" "$STAGE/bin/sys1rust" > "$(ab_bin base)"
  chmod +x "$(ab_bin base)"
}
phase_ab() {
  local r name
  base_from_env
  [ -x "$(ab_bin base)" ] || { say "ab: no baseline binary carried"; return; }
  [ -f "$STAGE/s32_q1.jsonl" ] || bodies "$SHORT" s32_q1 "$STAGE/s32_q1.jsonl"
  [ -f "$STAGE/s512_q10.jsonl" ] || bodies "$SMOKE" s512_q10 "$STAGE/s512_q10.jsonl"
  local names=(base new)
  [ -x "$(ab_bin mid)" ] && names+=(mid)
  for name in "${names[@]}"; do
    SYS1=$(ab_bin "$name") smoke_answers "ab-$name" --engine cuda
    [ "$name" = base ] && continue
    compare_answers "$RES/answers-ab-base.jsonl" "$RES/answers-ab-$name.jsonl" > "$RES/ab-compare-$name.json"
    say "ab answers, $name against base: $(cat "$RES/ab-compare-$name.json")"
  done
  if [ -n "${PARITY_REF:-}" ]; then
    if [ "$(cut -d' ' -f1 "$(dirname "$PARITY_REF")/checkpoint.sha256")" = "$(cut -d' ' -f1 "$RES/checkpoint.sha256")" ]; then
      local args=()
      for name in "${names[@]}"; do args+=("ab-$name=$RES/answers-ab-$name.jsonl"); done
      python3 "$ROOT/bench/gpu/parity.py" "$PARITY_REF" "${args[@]}" > "$RES/parity-ab.json"
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [print("parity", k, v.get("max_abs_err"), v.get("p99_abs_err"), v.get("flips_outside_ties"), v.get("pass")) for k, v in d["contenders"].items()]' \
        "$RES/parity-ab.json" >&2
    else
      say "PARITY_REF was made on another checkpoint: parity skipped"
    fi
  fi
  for r in $(seq 1 "$AB_ROUNDS"); do
    for name in base new; do
      # serve_bg starts $SYS1: this round's binary.
      local SYS1
      SYS1=$(ab_bin "$name")
      timeout -k 5 200 "$SYS1" bench --model "$CKPT" --engine cuda --workload "$SMOKE" \
        --shapes "$AB_SHAPES" --runs "$RUNS" --warmup "$WARMUP" \
        > "$RES/ab-$name-$r.json" 2> "$RES/ab-$name-$r.log"
      say "ab $name round $r: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join("%s:%.2f" % (s["shape"], s["median_ms"]) for s in d["shapes"]))' "$RES/ab-$name-$r.json")"
      serve_bg "ab-$name-$r"
      wrk_run "ab-$name-$r-s32_q1-c16" "$STAGE/s32_q1.jsonl" 16
      # The short load's last requests leave the server before the long one starts (wrk
      # stops without waiting for the answers in flight, whose slots are still held).
      sleep 1
      wrk_run "ab-$name-$r-s512_q10-c16" "$STAGE/s512_q10.jsonl" 16
      stop_bg
      say "ab $name round $r, server-side total_ms: $(server_latency "ab-$name-$r")"
    done
    pack
  done
}

STEP_SHAPES=${STEP_SHAPES:-1x150 1x600 4x600 10x600}
NCU_KERNELS=${NCU_KERNELS:-6}
phase_steps() {
  local name bin
  for name in new base; do
    bin=$STAGE/bin/cuda-profile
    [ "$name" = base ] && bin=$STAGE/bin/cuda-profile-base
    [ -x "$bin" ] || continue
    # shellcheck disable=SC2086 # the shapes are separate arguments
    timeout -k 5 200 "$bin" "$CKPT" $STEP_SHAPES > "$RES/steps-$name.jsonl" 2> "$RES/steps-$name.log"
    say "steps $name rc $?"
    python3 - "$RES/steps-$name.jsonl" <<'EOF' >&2
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    att = {k: round(v) for k, v in d["steps_us"].items() if "attention" in k}
    print(d["shape"], "run ms %.3f" % d["run_ms_median"], "gpu us", d["gpu_pass_us"], att)
EOF
  done
  if [ "${NCU:-1}" != 0 ] && command -v ncu >/dev/null; then
    # The first 10x600 pass runs kernel by kernel: its attention launches are the ones read.
    ITERS=1 timeout -k 5 240 ncu --clock-control none -k regex:attention_mma -c "$NCU_KERNELS" \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
      --section Occupancy --section LaunchStats --section InstructionStats \
      "$STAGE/bin/cuda-profile" "$CKPT" 10x600 > "$RES/ncu-attention.txt" 2>&1
    say "ncu rc $?"
    grep -E "attention_mma|Duration|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc A|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" \
      "$RES/ncu-attention.txt" | head -n 60 >&2
  fi
  pack
}

phase_router() {
  say "router on the GPU"
  timeout -k 5 200 python3 "$ROOT/bench/gpu/router_gpu.py" --bin "$SYS1" --model "$CKPT" \
    > "$RES/router-gpu.json" 2> "$RES/router-gpu.log"
  say "router rc $?"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["three_resident"]["gpu_mib_for_three"], "MiB for three;", d["evicted_load"]["reload_median_ms"], "ms reload vs", d["evicted_load"]["resident_median_ms"])' \
    "$RES/router-gpu.json" >&2
  pack
}

upstream() { # mode limit [extra args]
  local mode=$1 limit=$2; shift 2
  say "upstream $mode"
  timeout -k 10 "$limit" python3 "$ROOT/bench/gpu/upstream_gpu.py" --model "$CKPT" --workload "$SMOKE" \
    --mode "$mode" --answers "$RES/answers-upstream-$mode.jsonl" "$@" \
    > "$RES/upstream-$mode.json" 2> "$RES/upstream-$mode.log"
  say "upstream $mode rc $?"
  tail -n 6 "$RES/upstream-$mode.log" >&2
  pack
}

phase_upstream() {
  [ -f "$RES/answers-upstream-cpu-f32.jsonl" ] || upstream cpu-f32 240
  upstream cuda-stock 240 --shapes "$SHAPES" --runs "$RUNS" --warmup "$WARMUP"
  local budget=$((CALL_LIMIT - SECONDS - 60))
  if [ $budget -lt 120 ]; then
    say "upstream cuda-compile skipped: ${budget}s left in this call"
    return
  fi
  upstream cuda-compile $((budget + 40)) --shapes "$SHAPES" --runs "$RUNS" --warmup "$WARMUP" \
    --time-budget "$budget" --partial "$RES/upstream-cuda-compile.partial.json"
}

phase_parity() {
  local args=() f name
  for f in "$RES"/answers-*.jsonl; do
    name=$(basename "$f" .jsonl); name=${name#answers-}
    [ "$name" = upstream-cpu-f32 ] && continue
    args+=("$name=$f")
  done
  python3 "$ROOT/bench/gpu/parity.py" "$RES/answers-upstream-cpu-f32.jsonl" "${args[@]}" > "$RES/parity.json"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [print("parity", k, v.get("max_abs_err"), v.get("pass")) for k, v in d["contenders"].items()]' \
    "$RES/parity.json" >&2
  pack
}

for p in "$@"; do
  "phase_$p"
done
pack
say "done: $*"

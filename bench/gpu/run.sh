#!/usr/bin/env bash
# The device-side GPU harness: runs on the GPU machine, from the repository root, over what
# bench/gpu/carry.sh staged into .carry/ (usually all in .carry/p1: one call). Phases run in
# the order given, e.g.
#
#   bench/gpu/run.sh setup checkpoint replay engine parity cold
#
#   setup       unpack the carried groups into $STAGE (default /tmp/sys1), assemble libmlx.so
#               once all its parts are there, link the wheel's nvidia/ to the CUDA 13 libraries
#               of the machine's Python, install the laya wheel into $STAGE/py
#   checkpoint  write the `large` random checkpoint (seed 4242) to $STAGE/large
#   upstream    upstream laya 0.4.15 in-process on CUDA: cuda-stock, cuda-fp16 (answers + the
#               12 sizes), then cuda-compile within COMPILE_BUDGET seconds and what is left of
#               CALL_LIMIT (seconds since the harness started)
#   need_mlx    stop (rc 3) unless libmlx.so is assembled
#   diagnose    the f16 replay under each of DIAG_CONFIGS (MLX environment knobs); the first
#               that passes stays set for the later phases
#   reference   upstream cpu-f32 answers: the parity reference
#   cold        the engine's first start (empty kernel cache) and restart-to-ready, and the
#               first request of each size after each
#   replay      the fixture references replayed over HTTP in f16 on the GPU (the replay test)
#   engine      the engine in-process (its bench command) and over HTTP: answers for parity,
#               the 12 sizes, served throughput at CLIENTS concurrent clients
#   parity      every contender's answers vs upstream cpu-f32
#   probe       the gpu-probe example: GPU vs CPU op by op, whole forwards, layer taps
#   upstream_http  upstream laya-serve's own app over HTTP for each of UP_MODES (bench/gpu/
#               upstream_serve.py; the wheels from bench/gpu/upstream-wheels.sh)
#   variants    the engine in-process under other MLX settings (VARIANTS)
#   cuda_tests  laya-cuda's GPU tests (fixture parity, determinism, graphs, attention paths)
#   engines     `engine` for sys1rust-cuda (--engine cuda) and sys1rust-mlx (--engine mlx)
#
# Every contender on one machine takes three consecutive calls (the machine stays warm
# between them; results accumulate in $STAGE/res):
#   setup checkpoint reference replay engine cold upstream_http        # ~7 min
#   upstream                                                            # ~9 min, compile last
#   UP_MODES=cuda-compile upstream_http parity                          # ~6 min
#
# Another engine reuses it by setting ENGINE (a name), ENGINE_SERVE (a command that prints a
# JSON ready line with "address", given --port 0 style arguments already) and ENGINE_BENCH (a
# command that prints `sys1rust bench`'s JSON report); the defaults run sys1rust f16 on the GPU.
# Results accumulate in $STAGE/res (kept while the machine stays warm) and are packed into
# $OUT/res-<phases>.tar.gz at the end of each phase; a short summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
STAGE=${STAGE:-/tmp/sys1}
RES=$STAGE/res
OUT=${OUT:-$ROOT/target/gpu-out}
RUNS=${RUNS:-50}
WARMUP=${WARMUP:-5}
CLIENTS=${CLIENTS:-16}
TPUT_SECONDS=${TPUT_SECONDS:-5}
COMPILE_BUDGET=${COMPILE_BUDGET:-330}
CALL_LIMIT=${CALL_LIMIT:-570}
SHAPES=${SHAPES:-s64_q1,s64_q4,s64_q10,s128_q1,s128_q4,s128_q10,s256_q1,s256_q4,s256_q10,s512_q1,s512_q4,s512_q10}
SEED=$STAGE/seed
SMOKE=$SEED/smoke.jsonl
CKPT=${CKPT:-$STAGE/large}
SYS1=$STAGE/bin/sys1rust
ENGINE=${ENGINE:-sys1rust}
ENGINE_SERVE=${ENGINE_SERVE:-$SYS1 serve --model $CKPT --f16 --device gpu --port 0}
ENGINE_BENCH=${ENGINE_BENCH:-$SYS1 bench --model $CKPT --f16 --device gpu}
mkdir -p "$STAGE" "$RES" "$OUT"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# laya-cuda opens NVRTC and cuBLASLt by soname: the CUDA 13 libraries of the machine's Python
# (linked into $STAGE/site/nvidia by setup), then the toolkit's.
export LD_LIBRARY_PATH=$STAGE/site/mlx/lib:$STAGE/site/nvidia/cu13/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$STAGE/py${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export SYS1_DEVICE=gpu

say() { printf '[run.sh %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
PHASES="$*"

pack() {
  tar -C "$STAGE" -czf "$OUT/res.tar.gz" res 2>/dev/null
}

phase_setup() {
  mkdir -p "$STAGE/parts" "$STAGE/whl"
  local d f
  for d in "$ROOT"/.carry/p*/; do
    [ -d "$d" ] || continue
    for f in "$d"*; do
      case $(basename "$f") in
        libmlx.so.xz.part*) [ -f "$STAGE/parts/$(basename "$f")" ] || cp "$f" "$STAGE/parts/" ;;
        *.tar.xz)
          if [ ! -f "$STAGE/.unpacked-$(basename "$f")" ]; then
            tar -C "$STAGE" -xJf "$f" && touch "$STAGE/.unpacked-$(basename "$f")"
          fi ;;
        *.whl) cp "$f" "$STAGE/whl/" ;;
        MANIFEST) cp "$f" "$STAGE/MANIFEST" ;;
      esac
    done
  done
  local lib=$STAGE/site/mlx/lib/libmlx.so
  if [ ! -f "$lib" ] && [ -f "$STAGE/MANIFEST" ]; then
    local want missing=0 name sum
    want=$(awk '$1 == "libmlx.so" {print $2}' "$STAGE/MANIFEST")
    while read -r name sum; do
      [ "$name" = libmlx.so ] && continue
      if [ ! -f "$STAGE/parts/$name" ]; then missing=1; continue; fi
      [ "$(sha256sum "$STAGE/parts/$name" | cut -d' ' -f1)" = "$sum" ] || { say "bad part $name"; missing=1; }
    done < "$STAGE/MANIFEST"
    if [ $missing = 0 ]; then
      mkdir -p "$STAGE/site/mlx/lib"
      awk '$1 != "libmlx.so" {print $1}' "$STAGE/MANIFEST" | sed "s,^,$STAGE/parts/," | xargs cat | xz -dc > "$lib.tmp"
      if [ "$(sha256sum "$lib.tmp" | cut -d' ' -f1)" = "$want" ]; then
        mv "$lib.tmp" "$lib"
        say "libmlx.so assembled and verified"
      else
        say "libmlx.so checksum mismatch"
      fi
    else
      say "libmlx.so: parts still missing ($(ls "$STAGE/parts" | tr '\n' ' '))"
    fi
  fi
  # Results of an earlier machine carried back (e.g. upstream's answers): restored, not redone.
  for f in "$ROOT"/.carry/p*/prev/*; do
    [ -f "$f" ] && [ ! -f "$RES/$(basename "$f")" ] && cp "$f" "$RES/"
  done
  # The wheel's RPATH looks in ../../nvidia/{cu13,cublas,...}/lib beside mlx/.
  if [ ! -e "$STAGE/site/nvidia" ]; then
    local nv
    nv=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || echo /opt/torch/.venv/lib/python3.12/site-packages/nvidia)
    mkdir -p "$STAGE/site" && ln -sfn "$nv" "$STAGE/site/nvidia"
  fi
  # Upstream laya-serve's HTTP stack, apart from $STAGE/py so its newer typing_extensions and
  # friends stay out of the in-process phases.
  if [ ! -d "$STAGE/serve-py/fastapi" ] && ls "$STAGE"/wheels/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$STAGE/serve-py" "$STAGE"/wheels/*.whl \
      || for w in "$STAGE"/wheels/*.whl; do python3 -m zipfile -e "$w" "$STAGE/serve-py"; done
  fi
  if [ ! -d "$STAGE/py/laya" ] && ls "$STAGE"/whl/laya-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$STAGE/py" "$STAGE"/whl/laya-*.whl
  fi
  # The replay test starts the server at the path baked in when it was compiled.
  if [ -f "$STAGE/bin/replay.bin-path" ] && [ -x "$SYS1" ]; then
    local baked
    baked=$(cat "$STAGE/bin/replay.bin-path")
    [ -e "$baked" ] || { mkdir -p "$(dirname "$baked")" && ln -sf "$SYS1" "$baked"; }
  fi
  {
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
    nproc; free -g | head -2; uname -r
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
    ls -la "$STAGE/site/mlx/lib" 2>/dev/null
    [ -f "$STAGE/site/mlx/lib/libmlx.so" ] && ldd "$SYS1" | grep -E 'not found|mlx|cuda|cublas|nvrtc|cudnn|nccl|cufft'
  } > "$RES/machine.txt" 2>&1
}

phase_checkpoint() {
  if [ ! -f "$CKPT/model.safetensors" ]; then
    local t0=$SECONDS
    LD_LIBRARY_PATH=$STAGE/stub "$STAGE/bin/make-checkpoint" --preset large --seed 4242 --out "$CKPT" \
      --configs "$STAGE/fixtures" > "$RES/checkpoint.json"
    say "checkpoint written in $((SECONDS - t0)) s"
  fi
  sha256sum "$CKPT/model.safetensors" > "$RES/checkpoint.sha256"
}

upstream() { # mode [extra args]
  local mode=$1; shift
  say "upstream $mode"
  timeout -k 5 240 python3 "$ROOT/bench/gpu/upstream_gpu.py" --model "$CKPT" --workload "$SMOKE" --mode "$mode" \
    --answers "$RES/answers-upstream-$mode.jsonl" "$@" > "$RES/upstream-$mode.json" 2> "$RES/upstream-$mode.log"
  local rc=$?
  tail -n 14 "$RES/upstream-$mode.log" >&2
  [ $rc = 0 ] || say "upstream $mode failed (rc $rc)"
  pack
}

# MLX CUDA settings to try, in order, until the f16 fixture replay passes; the first that
# passes is kept (in $RES/config.env) for the phases after it. Each is also recorded, so the
# write-up can say which MLX path is at fault.
DIAG_CONFIGS=${DIAG_CONFIGS:-"MLX_CUDA_USE_CUDNN_SDPA=0 MLX_USE_CUDA_GRAPHS=0 MLX_CUDA_USE_CUDNN_SDPA=0,MLX_USE_CUDA_GRAPHS=0"}
phase_diagnose() {
  local cfg chosen="" rc
  for cfg in $DIAG_CONFIGS; do
    say "replay f16 with $cfg"
    env ${cfg//,/ } SYS1_FIXTURES=$STAGE/fixtures timeout -k 5 90 "$STAGE/bin/replay" \
      --exact replay::replay_f16_within_tolerance --nocapture > "$RES/replay-f16-$cfg.log" 2>&1
    rc=$?
    say "replay f16 with $cfg: rc $rc"
    grep -E "requests replayed|panicked at|test result" -A1 "$RES/replay-f16-$cfg.log" | head -4 >&2
    [ $rc = 0 ] && [ -z "$chosen" ] && chosen=$cfg
  done
  if [ -n "$chosen" ]; then
    echo "${chosen//,/ }" > "$RES/config.env"
    say "using $chosen for the phases that follow"
  fi
  pack
}

# The GPU parity probe (laya-mlx's gpu-probe example): the operations
# with the engine's layouts, whole forwards and layer taps, GPU against CPU f32; then the
# forwards again under each of PROBE_CONFIGS (MLX environment knobs).
PROBE_CONFIGS=${PROBE_CONFIGS:-}
probe() { # name timeout env... -- args...
  local name=$1 limit=$2; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  say "probe $name"
  env "${envs[@]}" timeout -k 5 "$limit" "$@" > "$RES/probe-$name.txt" 2>&1
  say "probe $name: rc $?"
  grep -E "BAD|ERROR|^forward|^repeat|section|panicked|error" "$RES/probe-$name.txt" | head -40 >&2
  pack
}
phase_probe() {
  # Whole forwards on the tiny fixture when it was carried: their CPU f32 reference runs on the
  # CUDA wheel's bundled reference BLAS, minutes per `large` forward.
  local model=$CKPT
  [ -f "$STAGE/fixtures/checkpoints/tiny/model.safetensors" ] && model=$STAGE/fixtures/checkpoints/tiny
  probe default 200 X=1 -- "$STAGE/bin/gpu-probe" "$model" ops forward taps
  # Attention over strided views may corrupt memory: its own process, after the rest.
  probe strided 60 X=1 -- "$STAGE/bin/gpu-probe" "$CKPT" strided
  local cfg
  for cfg in $PROBE_CONFIGS; do
    # shellcheck disable=SC2086 # one env argument per VAR=value
    probe "$cfg" 120 ${cfg//,/ } -- "$STAGE/bin/gpu-probe" "$CKPT" forward
  done
}

phase_reference() {
  upstream cpu-f32
}

# Stop here (rc 3) when libmlx.so has not been assembled: the later parts did not arrive, or the
# machine went cold between the calls that carried them.
phase_need_mlx() {
  if [ ! -f "$STAGE/site/mlx/lib/libmlx.so" ]; then
    say "libmlx.so is not assembled: carry the missing groups again"
    pack
    exit 3
  fi
}

phase_upstream() {
  upstream cuda-stock --shapes "$SHAPES" --runs "$RUNS" --warmup "$WARMUP"
  upstream cuda-fp16 --shapes "$SHAPES" --runs "$RUNS" --warmup "$WARMUP"
  # Its load compiles (minutes); the timing loop stops starting new sizes once the budget is
  # spent, and a hard timeout ends it regardless.
  # Within what is left of this call (CALL_LIMIT seconds from the harness's start).
  local budget=$COMPILE_BUDGET left=$((CALL_LIMIT - SECONDS - 60))
  [ $left -lt $budget ] && budget=$left
  if [ $budget -lt 60 ]; then
    say "upstream cuda-compile skipped: ${left}s left in this call"
    echo "skipped: ${left}s left in the call" > "$RES/upstream-cuda-compile.log"
    return
  fi
  say "upstream cuda-compile (budget ${budget}s)"
  timeout -k 10 $((budget + 40)) python3 "$ROOT/bench/gpu/upstream_gpu.py" --model "$CKPT" \
    --workload "$SMOKE" --mode cuda-compile --answers "$RES/answers-upstream-cuda-compile.jsonl" \
    --shapes "$SHAPES" --runs "$RUNS" --warmup "$WARMUP" --time-budget "$budget" \
    --partial "$RES/upstream-cuda-compile.partial.json" \
    > "$RES/upstream-cuda-compile.json" 2> "$RES/upstream-cuda-compile.log"
  say "upstream cuda-compile rc $?"
  tail -n 14 "$RES/upstream-cuda-compile.log" >&2
  pack
}

phase_cold() {
  local kc=$STAGE/kernel-cache-cold
  rm -rf "$kc"
  say "$ENGINE first start (empty kernel cache)"
  timeout -k 5 180 python3 "$ROOT/bench/gpu/served.py" --name "$ENGINE-first-start" --cmd "$ENGINE_SERVE --kernel-cache $kc" \
    --workload "$SMOKE" --first "$SHAPES" --log "$RES/cold-first.log" > "$RES/cold-first.json"
  say "$ENGINE restart (kernel cache from the first start)"
  timeout -k 5 120 python3 "$ROOT/bench/gpu/served.py" --name "$ENGINE-restart" --cmd "$ENGINE_SERVE --kernel-cache $kc" \
    --workload "$SMOKE" --first "$SHAPES" --log "$RES/cold-restart.log" > "$RES/cold-restart.json"
  du -sh "$kc" > "$RES/cold-kernel-cache.txt" 2>&1
  ls "$kc" | head -50 >> "$RES/cold-kernel-cache.txt"
  pack
}

# The engine in-process under other MLX settings, name:VAR=value[,VAR=value] each: what each
# of the engine's CUDA defaults (laya_mlx::backend) buys, measured side by side.
VARIANTS=${VARIANTS:-"cudnn:MLX_CUDA_USE_CUDNN_SDPA=1 nographs:MLX_USE_CUDA_GRAPHS=0"}
phase_variants() {
  local v name cfg
  for v in $VARIANTS; do
    name=${v%%:*} cfg=${v#*:}
    say "$ENGINE in-process, $cfg"
    env ${cfg//,/ } timeout -k 5 120 $ENGINE_BENCH --workload "$SMOKE" --shapes "$SHAPES" --runs "$RUNS" \
      --warmup "$WARMUP" > "$RES/$ENGINE-$name-inproc.json" 2> "$RES/$ENGINE-$name-inproc.log"
    say "in-process $name rc $?"
    pack
  done
}

phase_replay() {
  say "replay: fixture references in f16 on the GPU"
  SYS1_FIXTURES=$STAGE/fixtures timeout -k 5 240 "$STAGE/bin/replay" --exact replay::replay_f16_within_tolerance --nocapture \
    > "$RES/replay-f16.log" 2>&1
  say "replay f16 rc $?"
  tail -n 5 "$RES/replay-f16.log" >&2
  pack
}

phase_cuda_tests() {
  say "cuda_tests: laya-cuda against the fixture references, determinism, graphs, attention paths"
  SYS1_FIXTURES=$STAGE/fixtures timeout -k 5 300 "$STAGE/bin/cuda-answers" --nocapture --test-threads 1 \
    > "$RES/cuda-tests.log" 2>&1
  say "cuda_tests rc $?"
  grep -E "^test |running on|skipped|cuda f16|passes;|panicked|error" "$RES/cuda-tests.log" | head -n 30 >&2
  pack
}

# Both sys1rust engines, each in-process and over HTTP (phase_engine).
phase_engines() {
  ENGINE=sys1rust-cuda ENGINE_SERVE="$SYS1 serve --model $CKPT --engine cuda --port 0" \
    ENGINE_BENCH="$SYS1 bench --model $CKPT --engine cuda" phase_engine
  ENGINE=sys1rust-mlx ENGINE_SERVE="$SYS1 serve --model $CKPT --engine mlx --f16 --device gpu --port 0" \
    ENGINE_BENCH="$SYS1 bench --model $CKPT --engine mlx --f16 --device gpu" phase_engine
}

phase_engine() {
  say "$ENGINE in-process"
  timeout -k 5 150 $ENGINE_BENCH --workload "$SMOKE" --shapes "$SHAPES" --runs "$RUNS" --warmup "$WARMUP" \
    > "$RES/$ENGINE-inproc.json" 2> "$RES/$ENGINE-inproc.log"
  say "$ENGINE in-process rc $?"
  say "$ENGINE over HTTP"
  timeout -k 5 200 python3 "$ROOT/bench/gpu/served.py" --name "$ENGINE-http" --cmd "$ENGINE_SERVE" --workload "$SMOKE" \
    --answers "$RES/answers-$ENGINE-gpu-f16.jsonl" --shapes "$SHAPES" --runs "$RUNS" --warmup "$WARMUP" \
    --throughput "$SEED/short.jsonl:s32_q1,$SMOKE:s64_q1,$SMOKE:s128_q1,$SMOKE:s512_q10" \
    --clients "$CLIENTS" --seconds "$TPUT_SECONDS" --log "$RES/$ENGINE-http.log" > "$RES/$ENGINE-http.json"
  say "$ENGINE over HTTP rc $?"
  pack
}

# Upstream laya-serve's own HTTP app (bench/gpu/upstream_serve.py), measured like phase_engine
# measures sys1rust over HTTP, with fewer runs (~35 ms a request, ~15 s load).
UP_RUNS=${UP_RUNS:-20}
UP_WARMUP=${UP_WARMUP:-3}
UP_MODES=${UP_MODES:-"cuda-stock cuda-fp16"}
phase_upstream_http() {
  local mode
  for mode in $UP_MODES; do
    say "upstream $mode over HTTP"
    # The compiled mode spends minutes compiling before its ready line (261 s on an H200).
    local limit=150
    [ "$mode" = cuda-compile ] && limit=560
    timeout -k 5 $limit python3 "$ROOT/bench/gpu/served.py" --name "upstream-$mode-http" \
      --cmd "python3 $ROOT/bench/gpu/upstream_serve.py --model $CKPT --mode $mode --pypath $STAGE/serve-py" \
      --workload "$SMOKE" --answers "$RES/answers-upstream-$mode-http.jsonl" \
      --shapes "$SHAPES" --runs "$UP_RUNS" --warmup "$UP_WARMUP" \
      --throughput "$SEED/short.jsonl:s32_q1,$SMOKE:s64_q1,$SMOKE:s128_q1,$SMOKE:s512_q10" \
      --clients "$CLIENTS" --seconds "$TPUT_SECONDS" --log "$RES/upstream-$mode-http.log" \
      > "$RES/upstream-$mode-http.json"
    say "upstream $mode over HTTP rc $?"
    tail -n 8 "$RES/upstream-$mode-http.log" >&2
    pack
  done
}

phase_parity() {
  local args=() f name
  for f in "$RES"/answers-*.jsonl; do
    name=$(basename "$f" .jsonl); name=${name#answers-}
    [ "$name" = upstream-cpu-f32 ] && continue
    args+=("$name=$f")
  done
  python3 "$ROOT/bench/gpu/parity.py" "$RES/answers-upstream-cpu-f32.jsonl" "${args[@]}" > "$RES/parity.json"
  pack
}

for p in "$@"; do
  # Settings chosen by `diagnose` apply to every later phase.
  if [ -f "$RES/config.env" ]; then
    for kv in $(cat "$RES/config.env"); do export "${kv?}"; done
  fi
  "phase_$p"
done
pack
say "done: $PHASES"
python3 - "$RES" <<'EOF' >&2
import json, os, sys
res = sys.argv[1]
for f in sorted(os.listdir(res)):
    if not f.endswith(".json") or f.startswith("answers"):
        continue
    try:
        d = json.load(open(os.path.join(res, f)))
    except Exception as e:
        print(f, "unreadable:", e); continue
    if "shapes" in d:
        print(f, "load_ms=%s" % d.get("load_ms"), " ".join("%s:%.1f" % (s["shape"], s["median_ms"] or -1) for s in d["shapes"]))
    if "ready_ms" in d:
        print(f, "ready_ms=%.0f" % d["ready_ms"], "first:", " ".join("%s:%.0f" % (x["shape"], x["wall_ms"]) for x in d.get("first", [])))
    for t in d.get("throughput", []):
        print(f, "tput %s:%s %.1f rps p99 %.1f" % (t["workload"], t["shape"], t["rps"], t["wall_p99_ms"] or -1))
    if "contenders" in d:
        for k, v in d["contenders"].items():
            print("parity", k, "max", v.get("max_abs_err"), "p99", v.get("p99_abs_err"), "pass", v.get("pass"))
EOF

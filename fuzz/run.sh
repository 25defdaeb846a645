#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer's coverage instrumentation on stable Rust (what
# `cargo fuzz build` does on nightly, minus sanitizers: the code under test is safe Rust) and
# runs each for a bounded time from seed corpora made of the fixture workloads.
#
#   fuzz/run.sh [SECONDS]          every target, SECONDS each (default 30)
#   FUZZ_TARGETS="pyjson" fuzz/run.sh 600
#   FUZZ_JOBS=2 fuzz/run.sh 3600   more processes per target
#
# The corpus each run grows is kept in target/fuzz/corpus/<target> and reused by the next. A
# crash stops the run with a failure status and leaves its input in
# target/fuzz/artifacts/<target>/: make it a regression test, then fix it. The last lines of
# each target's log (executions, coverage) are printed; full logs are target/fuzz/<target>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECONDS_EACH=${1:-30}
TARGETS=${FUZZ_TARGETS:-pyjson request body}
JOBS=${FUZZ_JOBS:-1}
OUT=$ROOT/target/fuzz

# The instrumentation cargo-fuzz asks rustc for (stable flags); `fuzzing` is its cfg.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# The fuzz targets link MLX through sys1rust and run where the fixtures are.
prebuilt=$(bash scripts/setup-mlx.sh)
export MLX_SYS_PREBUILT_DIR=${MLX_SYS_PREBUILT_DIR:-$prebuilt}
# An explicit --target keeps RUSTFLAGS off build scripts and proc macros (they would need
# libFuzzer's runtime to link).
host=$(rustc -vV | sed -n 's/^host: //p')
cargo build --release --locked --manifest-path fuzz/Cargo.toml --target-dir "$OUT/build" \
  --target "$host" --bins
BIN=$OUT/build/$host/release
# sys1rust links libmlx (the body target reaches it through sys1rust).
export LD_LIBRARY_PATH="$MLX_SYS_PREBUILT_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Seeds: every request body of the fixture workloads (single route and batch route), and the
# same bodies for the decoder (sent as they are, and compressed by the target).
seed() {
  python3 - "$OUT/seeds" crates/laya-fixtures/data/workloads/*.jsonl <<'PY'
import json, os, sys
out, files = sys.argv[1], sys.argv[2:]
for target in ("pyjson", "request", "body"):
    os.makedirs(os.path.join(out, target), exist_ok=True)
n = 0
for path in files:
    for line in open(path, encoding="utf-8"):
        case = json.loads(line)
        if "raw_body" in case:
            body = case["raw_body"].encode("utf-8", "surrogatepass")
        elif "body" in case:
            body = json.dumps(case["body"], ensure_ascii=False).encode("utf-8", "surrogatepass")
        else:
            continue
        batch = case.get("path", "").endswith("/batch")
        n += 1
        seeds = {
            "pyjson": body,
            "request": bytes([1 if batch else 0]) + body,
            "body": bytes([3]) + body,
        }
        for target, data in seeds.items():
            with open(os.path.join(out, target, f"{n:04d}"), "wb") as f:
                f.write(data)
        # The decoder gets each body compressed too: gzip, zstd, then broken.
        for i, pick in enumerate((4, 5, 12, 21, 29)):
            with open(os.path.join(out, "body", f"{n:04d}-{i}"), "wb") as f:
                f.write(bytes([pick]) + body)
# Long states read in windows (`overflow`), from the library-level long-window calls.
for line in open("crates/laya-fixtures/data/references/tiny/long-windows.jsonl", encoding="utf-8"):
    call = json.loads(line)["call"]
    req = {k: call[k] for k in ("state", "questions", "window", "stride") if k in call}
    req["overflow"] = "windows"
    n += 1
    with open(os.path.join(out, "request", f"{n:04d}"), "wb") as f:
        f.write(bytes([0]) + json.dumps(req, ensure_ascii=False).encode("utf-8"))
PY
}
seed

status=0
for t in $TARGETS; do
  mkdir -p "$OUT/corpus/$t" "$OUT/artifacts/$t"
  echo "fuzz/run.sh: $t for ${SECONDS_EACH}s" >&2
  # -rss_limit_mb bounds memory; -timeout flags any input taking over 10 s as a hang. With
  # several jobs libFuzzer writes each one's log as fuzz-N.log in the working directory.
  parallel=()
  [ "$JOBS" -gt 1 ] && parallel=(-jobs="$JOBS" -workers="$JOBS")
  if ! (cd "$OUT" && "$BIN/$t" "$OUT/corpus/$t" "$OUT/seeds/$t" \
    -max_total_time="$SECONDS_EACH" "${parallel[@]}" -timeout=10 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$t/" \
    >"$OUT/$t.log" 2>&1); then
    status=1
    echo "fuzz/run.sh: $t FAILED; inputs in $OUT/artifacts/$t/" >&2
    tail -n 40 "$OUT/$t.log" >&2
    continue
  fi
  cat "$OUT"/fuzz-*.log "$OUT/$t.log" 2>/dev/null |
    grep -E 'inline 8-bit counters|^#[0-9]+.*DONE|stat::number_of_executed_units|stat::new_units_added' |
    sed 's/: \([0-9]*\) \[0x.*/: \1/' >&2 || true
  rm -f "$OUT"/fuzz-*.log
done
exit $status

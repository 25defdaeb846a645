#!/usr/bin/env bash
# The router's cost on this machine: `sys1rust serve` without --model holding one, two and
# three `large` random checkpoints (typed-decisions- and english-shaped ModernBERT-large,
# multilingual-shaped mmBERT-base, made by the make-checkpoint example), its start-up time and
# memory (RSS when ready, peak RSS), and what a request pays that must load an evicted
# checkpoint (LAYA_PRELOAD=0, LAYA_MAX_LOADED=1, requests alternating between languages).
#
#   bench/router.sh [--runs N]          writes results/router-cpu.json and results/ROUTER.md
#
# Extra engine flags go in SERVE_ARGS (e.g. SERVE_ARGS="--engine cuda" on a GPU machine; the
# checkpoints are then made in $ROUTER_CKPTS).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUNS=3
[ "${1:-}" = --runs ] && RUNS=$2
CKPTS=${ROUTER_CKPTS:-$ROOT/target/bench/router}
SYS1=${SYS1:-$ROOT/target/release/sys1rust}
MAKE=${MAKE_CHECKPOINT:-$ROOT/target/release/examples/make-checkpoint}
OUT=${OUT:-$ROOT/results/router-${ROUTER_LABEL:-cpu}.json}

if [ ! -x "$SYS1" ] || [ ! -x "$MAKE" ]; then
  cargo build --release -p sys1rust -p laya-mlx --bin sys1rust --example make-checkpoint
fi
mkdir -p "$CKPTS"
[ -f "$CKPTS/typed/model.safetensors" ] || "$MAKE" --preset large --seed 4242 --out "$CKPTS/typed" --force
[ -f "$CKPTS/english/model.safetensors" ] || "$MAKE" --preset english --seed 4343 --out "$CKPTS/english" --force
[ -f "$CKPTS/multilingual/model.safetensors" ] || "$MAKE" --preset multilingual --seed 4444 --out "$CKPTS/multilingual" --force

python3 - "$SYS1" "$CKPTS" "$RUNS" "$OUT" ${SERVE_ARGS:-} <<'EOF'
import json, os, statistics, subprocess, sys, time, urllib.request

sys1, ckpts, runs, out, extra = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
names = {"typed-decisions": "typed", "english": "english", "multilingual": "multilingual"}
texts = {
    "english": "I was charged twice for my subscription this month, please refund one charge.",
    "multilingual": "Mein Konto wurde zweimal belastet, bitte erstatten Sie den doppelten Betrag.",
    "typed-decisions": "I was charged twice for my subscription this month, please refund one charge.",
}
question = {"dept": {"type": "choice", "instructions": "Which team?",
                     "criteria": {"billing": "charges", "technical": "bugs", "account": "login"}}}


def status(pid, key):
    for line in open("/proc/%d/status" % pid):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024.0      # MiB
    return None


def start(env_extra):
    env = dict(os.environ, LAYA_EXTRA_MODELS=json.dumps(names), HF_HUB_OFFLINE="1", RUST_LOG="warn",
               **env_extra)
    t0 = time.monotonic()
    p = subprocess.Popen([sys1, "serve", "--port", "0", *extra], cwd=ckpts, env=env,
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    ready_s = time.monotonic() - t0
    if not line:
        raise SystemExit("sys1rust exited before its ready line")
    return p, json.loads(line), ready_s


def post(addr, name, model=None):
    body = {"state": texts[name], "questions": question}
    if model:
        body["model"] = model
    req = urllib.request.Request("http://%s/v1/systemone" % addr, json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as r:
        r.read()
        return float(r.headers["x-inference-time-ms"]), (time.monotonic() - t0) * 1e3


report = {"machine": os.uname().nodename and "%s, %d cores" % (os.uname().machine, os.cpu_count()),
          "args": extra, "resident": [], "evicted": None}
for subset in (["english"], ["english", "multilingual"], ["english", "multilingual", "typed-decisions"]):
    rows = []
    for _ in range(runs):
        p, ready, ready_s = start({"LAYA_MODELS": ",".join(subset)})
        try:
            addr = ready["address"]
            rss = status(p.pid, "VmRSS")
            served = [post(addr, n, n)[0] for n in subset]
            rows.append({"ready_s": ready_s, "rss_mib": rss, "peak_mib": status(p.pid, "VmHWM"),
                         "rss_after_requests_mib": status(p.pid, "VmRSS"), "inference_ms": served,
                         "engine": ready.get("engine"), "device": ready.get("device"),
                         "precision": ready.get("precision")})
        finally:
            p.terminate(); p.wait(timeout=60)
    med = lambda k: statistics.median(r[k] for r in rows)
    report["resident"].append({"checkpoints": subset, "runs": runs, "ready_s": med("ready_s"),
                               "rss_mib": med("rss_mib"), "peak_mib": med("peak_mib"),
                               "rss_after_requests_mib": med("rss_after_requests_mib"),
                               "engine": rows[0]["engine"], "device": rows[0]["device"],
                               "precision": rows[0]["precision"]})

# One checkpoint resident at a time: every switch of language loads the other one.
p, ready, _ = start({"LAYA_PRELOAD": "0", "LAYA_MAX_LOADED": "1"})
try:
    addr = ready["address"]
    seq = ["english", "multilingual"] * (runs + 1)
    loads, warm = [], []
    for i, name in enumerate(seq):
        loads.append(post(addr, name)[0])
        warm.append(post(addr, name)[0])     # the same checkpoint, now resident
    report["evicted"] = {"requests": len(seq), "load_inference_ms_median": statistics.median(loads),
                         "resident_inference_ms_median": statistics.median(warm),
                         "peak_mib": status(p.pid, "VmHWM")}
finally:
    p.terminate(); p.wait(timeout=60)
json.dump(report, open(out, "w"), indent=2)
print(json.dumps(report, indent=2))
EOF

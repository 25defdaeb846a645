"""Upstream laya 0.4.15's `laya-serve` HTTP app on 127.0.0.1, for bench/gpu/served.py.

    python3 bench/gpu/upstream_serve.py --model DIR --mode cuda-stock [--port 0] \
        [--pypath DIR] [--threads N] [--log-level warning]

Prints one JSON line on stdout once the checkpoint is loaded and the port accepts connections:
    {"address": "127.0.0.1:PORT", "load_ms": ..., "engine": "upstream-<mode>", ...}
then serves until SIGTERM/SIGINT (uvicorn's own graceful shutdown).

What runs is upstream's, unmodified: `laya.serve.build_router` (configured through the same
LAYA_* variables laya-serve reads), `laya.serve.create_app`, and the uvicorn settings
`laya.serve.main` passes (its TCP_NODELAY protocol and log level). Only three things differ from
a bare `laya-serve`, each because a benchmark of one local checkpoint needs it:
  * the port: laya-serve refuses port 0, so the launcher binds a free port itself and hands the
    socket to uvicorn (no window in which another process can take it);
  * the checkpoints: the three built-in names are re-pointed at --model (LAYA_EXTRA_MODELS, the
    documented way to serve a fine-tune under a built-in name) and one Agent is built and
    attached under all three, so language routing never loads a second copy or reaches the Hub;
  * cuda-compile: laya-serve has no variable for the Agent's backend, so `backend="compile"` goes
    through the Router's public `agent_kwargs`, as `Router(agent_kwargs=...)` would.

Modes (the vocabulary of bench/gpu/upstream_gpu.py):
  cpu-f32       LAYA_DEVICE=cpu, no CPU autocast: PyTorch fp32
  cuda-stock    LAYA_DEVICE=cuda, the checkpoint's amp_dtype (bf16 on the typed-decisions configs)
  cuda-fp16     the same with LAYA_CUDA_AMP=fp16
  cuda-bf16     the same with LAYA_CUDA_AMP=bf16
  cuda-compile  cuda-stock with Agent(backend="compile") (its warm-up is part of load_ms)
"""
import argparse
import json
import os
import socket
import sys
import threading
import time

T_START = time.perf_counter()

MODES = ["cpu-f32", "cuda-stock", "cuda-fp16", "cuda-bf16", "cuda-compile"]
BUILTINS = ("english", "multilingual", "typed-decisions")


def configure_env(args):
    # Set before laya is imported: the Agent reads LAYA_CUDA_AMP when it loads, and
    # transformers reads HF_HUB_OFFLINE when it is imported.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ["LAYA_DEVICE"] = "cpu" if args.mode == "cpu-f32" else "cuda"
    os.environ.pop("LAYA_CPU_AMP", None)
    amp = {"cuda-fp16": "fp16", "cuda-bf16": "bf16"}.get(args.mode)
    if amp:
        os.environ["LAYA_CUDA_AMP"] = amp
    else:
        os.environ.pop("LAYA_CUDA_AMP", None)
    model = os.path.abspath(args.model)
    os.environ["LAYA_EXTRA_MODELS"] = json.dumps({name: model for name in BUILTINS})
    # The launcher preloads itself, so that one Agent serves every name.
    os.environ["LAYA_PRELOAD"] = "0"
    for var in ("LAYA_MODELS", "LAYA_DEFAULT_MODEL", "LAYA_AUTO_TASK", "LAYA_API_KEY", "LAYA_ROOT_PATH",
                "LAYA_IDLE_UNLOAD_SECONDS", "LAYA_SHA256_DIGESTS"):
        os.environ.pop(var, None)
    if args.threads:
        os.environ["LAYA_THREADS"] = str(args.threads)
    if args.log_level:
        os.environ["LAYA_LOG_LEVEL"] = args.log_level


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="local checkpoint directory")
    ap.add_argument("--mode", required=True, choices=MODES)
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    ap.add_argument("--pypath", action="append", default=[],
                    help="directory searched before site-packages (the carried serve wheels)")
    ap.add_argument("--threads", type=int, default=0, help="LAYA_THREADS (0: torch's default)")
    ap.add_argument("--log-level", default="", help="LAYA_LOG_LEVEL (default: laya-serve's, info)")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.model, "rl_agent_config.json")):
        raise SystemExit("%s is not a laya checkpoint directory (no rl_agent_config.json)" % args.model)

    # The ready line must be the first thing on stdout, and served.py stops reading stdout after
    # it (uvicorn's access log writes there): keep the real stdout for the ready line only and
    # send everything else that writes to fd 1 to stderr, where served.py's --log collects it.
    ready_out = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)

    # Ahead of site-packages, not after: pydantic 2.14 needs a newer typing_extensions than
    # torch's environment may carry, and a newer one is a superset for torch.
    for p in reversed(args.pypath):
        sys.path.insert(0, os.path.abspath(p))

    configure_env(args)

    # Bound before the model loads, so a port clash fails in seconds rather than after a load.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    host, port = sock.getsockname()[:2]
    # laya.serve.main reads these; they must name the socket uvicorn really serves.
    os.environ["LAYA_HOST"], os.environ["LAYA_PORT"] = host, str(port)

    t_import = time.perf_counter()
    import torch
    import uvicorn
    import laya
    import laya.serve as serve
    from laya.router import check_agent_kwargs
    import_ms = (time.perf_counter() - t_import) * 1e3

    t0 = time.perf_counter()
    router = serve.build_router()
    if args.mode == "cuda-compile":
        kwargs = {"backend": "compile"}
        check_agent_kwargs(kwargs)
        router.agent_kwargs = kwargs
    agent = router.load("english")
    for name in BUILTINS[1:]:
        router.attach(name, agent)
    if str(agent.device).startswith("cuda"):
        torch.cuda.synchronize()
    load_ms = (time.perf_counter() - t0) * 1e3
    if args.mode != "cpu-f32" and not str(agent.device).startswith("cuda"):
        # The Agent falls back to the CPU silently; a CPU number must not pass for a GPU one.
        raise SystemExit("upstream %s: the Agent is on %s, not CUDA" % (args.mode, agent.device))

    # laya.serve.main builds the app and the uvicorn settings in one call; run it with both
    # intercepted, so the app is built on our Router and the settings are the ones it chose.
    captured = {}
    real_create_app, real_run = serve.create_app, uvicorn.run
    serve.create_app = lambda router_=None: real_create_app(router)
    uvicorn.run = lambda app, **kw: captured.update(kw, app=app)
    try:
        serve.main()
    finally:
        serve.create_app, uvicorn.run = real_create_app, real_run
    app = captured.pop("app")
    config = uvicorn.Config(app, **captured)
    server = uvicorn.Server(config)

    warmup_s = getattr(getattr(agent, "backend_object", None), "warmup_s", None)
    ready = {
        "address": "%s:%d" % (host, port),
        "load_ms": load_ms,
        "import_ms": import_ms,
        "engine": "upstream-%s" % args.mode,
        "laya": getattr(laya, "__version__", None),
        "torch": torch.__version__,
        "device": str(agent.device),
        "precision": str(agent.dtype).replace("torch.", "") if agent.amp_enabled else "float32",
        "backend": getattr(agent, "backend", "eager"),
        "compile_warmup_s": warmup_s,
        "gpu": torch.cuda.get_device_name(0) if str(agent.device).startswith("cuda") else None,
    }

    def announce():
        # `started` turns true once the socket is listening, after the app's lifespan startup.
        while not server.started:
            if server.should_exit:
                return
            time.sleep(0.002)
        ready["ready_ms_in_process"] = (time.perf_counter() - T_START) * 1e3
        ready_out.write(json.dumps(ready) + "\n")
        ready_out.flush()
        print("upstream %s serving on %s (load %.0f ms, %s, %s, backend %s)"
              % (args.mode, ready["address"], load_ms, ready["device"], ready["precision"], ready["backend"]),
              file=sys.stderr, flush=True)

    threading.Thread(target=announce, daemon=True).start()
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Regenerates sys1rust's test fixtures (crates/laya-fixtures/data) with upstream laya 0.4.15.

Run it with the Python of the fixture venv (`setup.sh` builds it from requirements.lock):

  regen.py checkpoints   data/checkpoints/{tiny,tiny-multilingual-shape,tiny-english}
  regen.py workloads     data/workloads/{smoke,short,routing}.jsonl (edge.jsonl is kept as is)
  regen.py references    data/references/<checkpoint>/{smoke,short,edge,long-windows}.jsonl
  regen.py router        data/references/router/*.jsonl: the three checkpoints behind the three
                         names, one upstream server per configuration of SERVERS
  regen.py all           the four above, in order, then the manifest
  regen.py manifest      data/MANIFEST.sha256 (what the tests check the files against)
  regen.py verify        regenerate everything into a temporary directory and compare it with
                         data/ byte for byte

Options: --data DIR (default: ../data beside this script).

Everything is a pure function of this script, the inputs it names (the published checkpoint
configs under data/checkpoint-configs, the ModernBERT tokenizer under data/tokenizers, the edge
workload) and the locked package set: checkpoints from per-tensor seeded numpy streams,
workloads from fixed seeds, references from upstream's server on one CPU thread in fp32.
"""
import argparse
import base64
import copy
import filecmp
import hashlib
import http.client
import json
import math
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.normpath(os.path.join(HERE, "..", "data"))

# ----------------------------------------------------------------------------- checkpoints

# Small enough to commit (the 50,368-token embedding table dominates), wide enough for every
# engine: one 64-wide attention head, so the CUDA engine's kernels run it too.
DIMS = {
    "hidden_size": 64,
    "num_attention_heads": 1,
    "num_hidden_layers": 6,
    "intermediate_size": 96,
    "local_attention": 128,
    "vocab_size": 50368,
}

# name -> which published checkpoint's configs it starts from, its seed, whose tokenizer config
# it ships, and the dtype its `temperature` tensor is stored in (the english and multilingual
# files store it F32, typed-decisions F16).
CHECKPOINTS = {
    "tiny": {"base": "typed-decisions", "seed": 2101, "tokenizer_config": "typed-decisions",
             "temperature": "f16"},
    "tiny-multilingual-shape": {"base": "multilingual", "seed": 2102, "tokenizer_config": "english",
                                "temperature": "f32"},
    "tiny-english": {"base": "english", "seed": 2103, "tokenizer_config": "english",
                     "temperature": "f32"},
}


def tensor_rng(seed, name):
    """A numpy stream of its own per tensor, so values do not depend on iteration order."""
    import numpy as np

    digest = hashlib.sha256(("%d/%s" % (seed, name)).encode("utf-8")).digest()
    return np.random.RandomState(int.from_bytes(digest[:4], "little"))


def init_scale(name, shape, d, inter):
    """(mean, std) of a state-dict entry: scales at which every part of the network moves the
    answers (attention logits O(1), option logits spread over a few units, act head not
    saturated), and no norm weight of exactly 1 or bias of exactly 0 a port could ignore."""
    if name == "temperature":
        return 1.0, 0.0
    last = name.split(".")
    if name.endswith("bias") or name.endswith("in_proj_bias"):
        return 0.0, 0.02
    if ("norm" in last[-2] or name.startswith("scorer.0.")) and name.endswith(".weight"):
        return 1.0, 0.1
    if name == "encoder.embeddings.tok_embeddings.weight":
        return 0.0, 1.0
    if name.startswith("encoder."):
        if name.endswith("attn.Wqkv.weight") or name.endswith("mlp.Wi.weight"):
            return 0.0, 1.0 / math.sqrt(d)
        if name.endswith("attn.Wo.weight"):
            return 0.0, 0.5 / math.sqrt(d)
        if name.endswith("mlp.Wo.weight"):
            return 0.0, 0.5 / math.sqrt(inter)
    if name.startswith("head."):
        return 0.0, 1.0 / math.sqrt(shape[-1])
    return {
        "type_emb.weight": (0.0, 0.5),
        "scorer.1.weight": (0.0, 1.0 / math.sqrt(d)),
        "scorer.3.weight": (0.0, 16.0 / math.sqrt(d)),
        "act_head.0.weight": (0.0, 1.0 / math.sqrt(d + 4)),
        "act_head.2.weight": (0.0, 1.0 / 16.0),
    }[name]


def build_checkpoint(data, name, out):
    """One checkpoint in Laya's exact on-disk format, built and written by upstream's own code."""
    import numpy as np
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer, ModernBertConfig

    from laya.common import build_model
    from laya.train import save_checkpoint

    spec = CHECKPOINTS[name]
    configs = os.path.join(data, "checkpoint-configs")
    base = os.path.join(configs, spec["base"])
    if os.path.exists(out):
        shutil.rmtree(out)
    work = tempfile.mkdtemp(prefix=".regen-", dir=os.path.dirname(out))
    try:
        with open(os.path.join(base, "rl_agent_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        # The published encoder config with our dimensions, as transformers writes it.
        with open(os.path.join(base, "encoder", "config.json"), encoding="utf-8") as f:
            enc = json.load(f)
        enc.pop("transformers_version", None)
        enc.update(DIMS)
        every = enc.get("global_attn_every_n_layers", 3)
        enc["layer_types"] = ["full_attention" if i % every == 0 else "sliding_attention"
                              for i in range(enc["num_hidden_layers"])]
        enc["dtype"] = "float32"
        enc_dir = os.path.join(work, "encoder")
        ModernBertConfig(**enc).save_pretrained(enc_dir)
        with open(os.path.join(enc_dir, "config.json"), "rb") as f:
            encoder_bytes = f.read()

        torch.manual_seed(0)
        model = build_model(copy.deepcopy(cfg), encoder_dir=enc_dir, pretrained=False)
        d, inter = model.encoder.config.hidden_size, model.encoder.config.intermediate_size
        with torch.no_grad():
            for key, t in sorted(model.state_dict().items()):
                mean, std = init_scale(key, tuple(t.shape), d, inter)
                values = tensor_rng(spec["seed"], key).standard_normal(tuple(t.shape)) * std + mean
                t.copy_(torch.from_numpy(values.astype(np.float32)).to(t.dtype))

        tok_dir = os.path.join(work, "tokenizer-src")
        os.makedirs(tok_dir)
        shutil.copyfile(os.path.join(data, "tokenizers", "modernbert", "tokenizer.json"),
                        os.path.join(tok_dir, "tokenizer.json"))
        shutil.copyfile(os.path.join(configs, spec["tokenizer_config"], "tokenizer",
                                     "tokenizer_config.json"),
                        os.path.join(tok_dir, "tokenizer_config.json"))
        ckpt = os.path.join(work, "checkpoint")
        save_checkpoint(model, AutoTokenizer.from_pretrained(tok_dir), cfg, ckpt)
        # Laya's shipped tokenizer files, not transformers 5's rewrite of them (laya would
        # rewrite that one in place at load), and the encoder config as written above.
        shutil.rmtree(os.path.join(ckpt, "tokenizer"))
        shutil.copytree(tok_dir, os.path.join(ckpt, "tokenizer"))
        with open(os.path.join(ckpt, "encoder", "config.json"), "wb") as f:
            f.write(encoder_bytes)
        if spec["temperature"] == "f32":
            path = os.path.join(ckpt, "model.safetensors")
            tensors = load_file(path)
            tensors["temperature"] = tensors["temperature"].float()
            save_file(tensors, path)
        for root, _, files in os.walk(ckpt):
            os.chmod(root, 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        os.replace(ckpt, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def checkpoints(data):
    for name in CHECKPOINTS:
        out = os.path.join(data, "checkpoints", name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        build_checkpoint(data, name, out)
        log("checkpoint %s (%d bytes of weights)"
            % (name, os.path.getsize(os.path.join(out, "model.safetensors"))))


# ----------------------------------------------------------------------------- workloads

# Vocabulary of the synthetic support and operations texts.
NOUNS = ("invoice charge refund card subscription plan account password login token server "
         "cluster database replica backup region latency outage alert dashboard report order "
         "shipment parcel address contract renewal discount coupon license seat quota").split()
VERBS = ("failed", "doubled", "stopped", "expired", "changed", "crashed", "timed out",
         "was declined", "was delayed", "disappeared", "was locked", "was reset", "keeps failing",
         "was billed twice")
ADJ = "urgent broken slow missing wrong duplicate expired locked unexpected partial".split()
OPENERS = ("Hi team,", "Hello,", "Good morning,", "Dear support,", "Quick question:", "Help please.")


def sentence(rng):
    return "%s %s %s %s." % (rng.choice(["The", "My", "Our", "This"]), rng.choice(ADJ),
                              rng.choice(NOUNS), rng.choice(VERBS))


def ticket(rng, tok, tokens):
    """English ticket text of about `tokens` ModernBERT tokens (within 10%)."""
    parts = [rng.choice(OPENERS)]
    while len(tok.encode(" ".join(parts), add_special_tokens=False)) < tokens:
        parts.append(sentence(rng))
    text = " ".join(parts)
    while len(tok.encode(text, add_special_tokens=False)) > tokens * 1.1 and len(parts) > 2:
        parts.pop()
        text = " ".join(parts)
    return text


QUESTIONS = [
    ("dept", {"type": "choice", "instructions": "Which team should handle this ticket?",
              "criteria": {"billing": "invoices, charges, refunds", "technical": "bugs, outages",
                           "account": "login, profile, access"}}),
    ("urgency", {"type": "score", "instructions": "How urgent is this?",
                 "criteria": ["low", "medium", "high", "critical"]}),
    ("refund", {"type": "noul", "instructions": "Is the customer asking for a refund?"}),
    ("sentiment", {"type": "choice", "instructions": "What is the customer's mood?",
                   "criteria": ["calm", "annoyed", "angry"]}),
    ("escalate", {"type": "noul", "instructions": "Should a human take over?",
                  "criteria": {"true": "a person must answer", "false": "automation can answer"}}),
    ("severity", {"type": "score", "instructions": "How severe is the impact?",
                  "criteria": ["none", "minor", "major"]}),
    ("channel", {"type": "choice", "instructions": "Where should the reply go?",
                 "criteria": {"email": None, "phone": "", "chat": "live chat"}}),
    ("churn", {"type": "noul", "instructions": "Is the customer likely to cancel?"}),
    ("topic", {"type": "choice", "instructions": "What is the ticket about?",
               "criteria": ["payments", "performance", "security", "shipping", "other"]}),
    ("effort", {"type": "score", "instructions": "How much work will the fix take?",
                "criteria": ["minutes", "hours", "days", "weeks", "months"]}),
]


def smoke_and_short(tok):
    rng = random.Random(2201)
    smoke = []
    for tokens in (64, 128, 256, 512):
        for n_q in (1, 4, 10):
            for i in range(2):
                qs = dict(QUESTIONS[(i + j) % len(QUESTIONS)] for j in range(n_q))
                smoke.append({"id": "s%d_q%d_%03d" % (tokens, n_q, i),
                              "shape": {"state_tokens": tokens, "n_questions": n_q},
                              "body": {"state": ticket(rng, tok, tokens), "questions": qs}})
    rng = random.Random(2202)
    short = []
    for i in range(40):
        qid, q = QUESTIONS[i % len(QUESTIONS)]
        short.append({"id": "s32_q1_%03d" % i, "shape": {"state_tokens": 32, "n_questions": 1},
                      "body": {"state": ticket(rng, tok, rng.randint(24, 40)), "questions": {qid: q}}})
    return smoke, short


Q1 = {"dept": QUESTIONS[0][1]}
WORKFLOW = {qid: {"type": "noul", "instructions": "Does %s apply?" % qid}
            for qid in ("action", "category", "churn_risk", "needs_human", "urgency")}

# States the detector reads as English, another Latin-script language, another script, or
# nothing at all.
TEXTS = {
    "en": "I was charged twice for my subscription this month, please refund one of the charges.",
    "de": "Mein Konto wurde zweimal belastet, bitte erstatten Sie den doppelten Betrag zurück.",
    "fr": "J'ai été débité deux fois pour mon abonnement ce mois-ci, merci de me rembourser.",
    "es": "Me cobraron dos veces la suscripción este mes, por favor devuélvanme un cargo.",
    "it": "Mi è stato addebitato due volte l'abbonamento questo mese, vorrei un rimborso.",
    "pt": "Fui cobrado duas vezes pela assinatura este mês, por favor reembolsem uma cobrança.",
    "nl": "Ik ben deze maand twee keer gefactureerd voor mijn abonnement, graag een terugbetaling.",
    "zh": "我这个月的订阅被扣了两次费，请退还其中一笔费用。",
    "ja": "今月のサブスクリプションが二重に請求されました。返金をお願いします。",
    "ko": "이번 달 구독료가 두 번 청구되었습니다. 한 건을 환불해 주세요.",
    "ar": "تم خصم رسوم اشتراكي مرتين هذا الشهر، يرجى استرداد إحدى الرسوم.",
    "ru": "С меня дважды списали плату за подписку в этом месяце, верните одно списание.",
    "hi": "इस महीने मेरी सदस्यता के लिए दो बार शुल्क लिया गया, कृपया एक शुल्क वापस करें।",
    "el": "Χρεώθηκα δύο φορές για τη συνδρομή μου αυτόν τον μήνα, παρακαλώ επιστρέψτε μία χρέωση.",
    "he": "חויבתי פעמיים על המנוי שלי החודש, אנא החזירו את אחד החיובים.",
    "th": "เดือนนี้ฉันถูกเรียกเก็บเงินค่าสมาชิกสองครั้ง กรุณาคืนเงินหนึ่งรายการ",
    "mixed": "I was charged twice for my plan.\nBitte erstatten Sie mir den doppelten Betrag sofort zurück.",
    "digits": "12345 67890 !!! ??? 2026-12-01",
    "emoji": "👍🏽 🔥🔥 🎉",
    "empty": "",
    "code": "Deu erro (500) no checkout ontem à noite, o pagamento não passou.",
    "latin-unknown": "Zxq vrtp klmn qwrt brrr zzzt.",
}


def routing_workload():
    """Every routing rule of api.md §4.5-4.6 on the three checkpoints, with /health between."""
    lines = [{"id": "r000_health_at_start", "method": "GET", "path": "/health"}]

    def add(rid, body, path=None):
        line = {"id": rid, "body": body}
        if path:
            line["path"] = path
        lines.append(line)

    for lang, text in TEXTS.items():
        add("r1_detect_%s" % lang, {"state": text, "questions": Q1})
    add("r1_detect_object_state", {"state": {"subject": "Rechnung doppelt", "body": TEXTS["de"]},
                                   "questions": Q1})
    add("r1_detect_list_state", {"state": [{"role": "user", "text": TEXTS["en"]},
                                           {"role": "agent", "text": "Sorry to hear that."}],
                                 "questions": Q1})
    add("r1_detect_number_state", {"state": 42, "questions": Q1})
    for i, model in enumerate(["english", "en", " LAYA ", "default", "multilingual", "multi", "ml",
                               "laya-multilingual", "typed-decisions", "typed", "typed_decisions",
                               "decisions", "laya-typed-decisions",
                               "convaiinnovations/laya-multilingual",
                               "convaiinnovations/laya-typed-decisions", "convaiinnovations/laya",
                               "CONVAIINNOVATIONS/LAYA-TYPED-DECISIONS", "jev-1", "auto", 5, True,
                               "", None, "org/repo", "./local", "~/models/x", "C:\\models"]):
        add("r2_model_%02d" % i, {"state": TEXTS["de"], "questions": Q1, "model": model})
    for i, task in enumerate(["typed_decisions", "typed-decisions", "Typed-Decisions", "english",
                              "multi", "laya", "zz", 5, "", None]):
        add("r3_task_%02d" % i, {"state": TEXTS["en"], "questions": Q1, "task": task})
    add("r3_model_beats_task", {"state": TEXTS["en"], "questions": Q1, "model": "multilingual",
                                "task": "typed_decisions"})
    add("r4_workflow_ids", {"state": TEXTS["en"], "questions": WORKFLOW})
    add("r4_workflow_ids_german", {"state": TEXTS["de"], "questions": WORKFLOW})
    add("r4_workflow_with_lang", {"state": TEXTS["en"], "questions": WORKFLOW, "lang": "de"})
    for i, lang in enumerate(["en", "EN", "en_US.UTF-8", "eng", "english", "de", "fr-CA", "zh",
                              "C", "C.UTF-8", "POSIX", "und", "zxx", "mul", "", "  "]):
        add("r5_lang_%02d" % i, {"state": TEXTS["zh"], "questions": Q1, "lang": lang})
    for i, guess in enumerate(["en", "de", "und", ""]):
        add("r6_lang_guess_%02d" % i, {"state": TEXTS["de"], "questions": Q1, "lang_guess": guess})
    add("r6_lang_beats_guess", {"state": TEXTS["en"], "questions": Q1, "lang": "de",
                                "lang_guess": "en"})
    add("r7_empty_questions", {"state": TEXTS["zh"], "questions": {}})
    add("r7_question_error_after_routing", {"state": TEXTS["de"], "questions": {
        "q": {"type": "nope", "instructions": "x"}}})
    lines.append({"id": "r7_health_after", "method": "GET", "path": "/health"})
    mixed_states = [TEXTS["en"], TEXTS["de"], TEXTS["zh"], TEXTS["digits"], TEXTS["fr"], TEXTS["en"]]
    add("r8_batch_mixed", {"states": mixed_states, "questions": dict(QUESTIONS[:3])},
        "/v1/systemone/batch")
    add("r8_batch_mixed_batch_size", {"states": mixed_states, "questions": Q1, "batch_size": 2},
        "/v1/systemone/batch")
    add("r8_batch_pinned", {"states": mixed_states, "questions": Q1, "model": "english"},
        "/v1/systemone/batch")
    add("r8_batch_lang", {"states": mixed_states[:3], "questions": Q1, "lang": "en"},
        "/v1/systemone/batch")
    add("r8_batch_unknown_task", {"states": mixed_states[:2], "questions": Q1, "task": "zz"},
        "/v1/systemone/batch")
    add("r8_batch_min_confidence", {"states": mixed_states[:3], "questions": dict(QUESTIONS[:3]),
                                    "min_confidence": 0.6}, "/v1/systemone/batch")
    lines.append({"id": "r9_health_at_end", "method": "GET", "path": "/health"})
    return lines


def lru_workload():
    """Requests alternating between checkpoints, /health after each (for LAYA_MAX_LOADED=1)."""
    lines = [{"id": "l000_health", "method": "GET", "path": "/health"}]
    for i, lang in enumerate(["en", "de", "en", "zh", "de", "en"]):
        lines.append({"id": "l%03d_%s" % (2 * i + 1, lang),
                      "body": {"state": TEXTS[lang], "questions": Q1}})
        lines.append({"id": "l%03d_health" % (2 * i + 2), "method": "GET", "path": "/health"})
    lines.append({"id": "l099_typed", "body": {"state": TEXTS["en"], "questions": Q1,
                                               "model": "typed"}})
    lines.append({"id": "l100_health", "method": "GET", "path": "/health"})
    return lines


def corrupt_workload():
    """A checkpoint that cannot load behind `english`: its requests fail, the others answer."""
    return [
        {"id": "c0_health", "method": "GET", "path": "/health"},
        {"id": "c1_english", "body": {"state": TEXTS["en"], "questions": Q1}},
        {"id": "c2_german", "body": {"state": TEXTS["de"], "questions": Q1}},
        {"id": "c3_english_again", "body": {"state": TEXTS["en"], "questions": Q1}},
        {"id": "c4_pinned_typed", "body": {"state": TEXTS["en"], "questions": Q1, "model": "typed"}},
        {"id": "c5_health", "method": "GET", "path": "/health"},
    ]


def write_jsonl(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def workloads(data):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.join(data, "checkpoints", "tiny", "tokenizer"))
    smoke, short = smoke_and_short(tok)
    w = os.path.join(data, "workloads")
    write_jsonl(os.path.join(w, "smoke.jsonl"), smoke)
    write_jsonl(os.path.join(w, "short.jsonl"), short)
    write_jsonl(os.path.join(w, "routing.jsonl"), routing_workload())
    write_jsonl(os.path.join(w, "lru.jsonl"), lru_workload())
    write_jsonl(os.path.join(w, "corrupt.jsonl"), corrupt_workload())
    log("workloads: %d smoke, %d short" % (len(smoke), len(short)))


# ----------------------------------------------------------------------------- references

TIMING = {"server-timing": "inference;dur=<ms>", "x-inference-time-ms": "<ms>"}
KEPT = ("content-type", "retry-after", "allow", "location")
# Anything that could change upstream's numerics or routing is removed from the server's
# environment; the rest is set explicitly.
SCRUB = ("LAYA_", "HF_", "TRANSFORMERS_", "TORCH", "CUDA", "OMP_", "MKL_", "PYTORCH_")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Upstream:
    """`python -m laya.serve` (the laya-serve console script) with `names` -> checkpoint
    directory names under `parent` (the working directory), CPU, fp32, one thread."""

    def __init__(self, parent, names, extra_env=None):
        self.parent, self.names, self.extra = parent, names, extra_env or {}
        self.port = free_port()

    def __enter__(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB)}
        env.update({
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
            "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "PYTHONHASHSEED": "0", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "LAYA_HOST": "127.0.0.1", "LAYA_PORT": str(self.port), "LAYA_DEVICE": "cpu",
            "LAYA_THREADS": "1", "LAYA_PRELOAD": "1", "LAYA_LOG_LEVEL": "warning",
            "LAYA_EXTRA_MODELS": json.dumps(self.names),
        })
        env.update(self.extra)
        self.proc = subprocess.Popen([sys.executable, "-m", "laya.serve"], cwd=self.parent, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + 600
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("laya-serve exited at start: %s" % self.proc.stderr.read().decode())
            try:
                if send(self.port, "GET", "/health", None, {})[0] == 200:
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("laya-serve did not start")
            time.sleep(0.2)

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def send(port, method, path, body, headers):
    """One request on a fresh HTTP/1.1 connection: status, headers, body bytes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        all_headers = {"Connection": "close"}
        if body is not None:
            all_headers["Content-Type"] = "application/json"
            all_headers["Content-Length"] = str(len(body))
        all_headers.update(headers)
        for k, v in all_headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        if body is not None:
            conn.send(body)
        resp = conn.getresponse()
        return resp.status, [(k.lower(), v) for k, v in resp.getheaders()], resp.read()
    finally:
        conn.close()


def request_of(line):
    """(method, path, body bytes or None, headers, the request as recorded)."""
    method, path = line.get("method", "POST"), line.get("path", "/v1/systemone")
    headers = line.get("headers") or {}
    rec = {"method": method, "path": path}
    if headers:
        rec["headers"] = headers
    if "raw_body" in line:
        body = line["raw_body"].encode("utf-8", "surrogatepass")
        rec["raw_body"] = line["raw_body"]
    elif "raw_body_b64" in line:
        body = base64.b64decode(line["raw_body_b64"])
        rec["raw_body_b64"] = line["raw_body_b64"]
    elif "body" in line:
        body = json.dumps(line["body"], ensure_ascii=False).encode("utf-8")
        rec["body"] = line["body"]
    else:
        body = None
    return method, path, body, headers, rec


class Rows:
    """Upstream's token rows and raw logits of an answered request, recomputed in this process
    with upstream's own encode and forward, in the server's grouping of forward passes."""

    def __init__(self, dirs):
        import torch

        torch.set_num_threads(1)
        self.torch = torch
        self.dirs = dirs    # routed name -> checkpoint directory
        self.agents = {}

    def agent(self, name):
        from laya.agent import Agent

        path = self.dirs[name]
        if path not in self.agents:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.agents[path] = Agent(path, device="cpu")
        return self.agents[path]

    def passes(self, name, states, indices, questions, opts, batch_size, numbered):
        """Upstream's Agent.predict_batch on `states[indices]`, pass by pass, and the answers."""
        import numpy as np
        from laya.common import collate_items

        a = self.agent(name)
        ids = list(questions)
        for qid in ids:
            a._check_question(qid, questions[qid])
        internal = {qid: a._to_internal(questions[qid]) for qid in ids}
        encoded = {i: a._encode_state(states[i], ids, internal, **opts) for i in indices}
        chunk = batch_size if batch_size and batch_size > 0 else len(indices)
        passes, answers = [], {}
        for start in range(0, len(indices), chunk):
            members = indices[start:start + chunk]
            items = [encoded[i] for i in members]
            b = collate_items(items, a.tok.pad_token_id)
            with self.torch.no_grad():
                logits, act = a._infer(b)
            logits, act = logits.float().cpu().numpy(), act.float().cpu().numpy()
            act_p = self.torch.softmax(self.torch.from_numpy(act), -1).numpy()
            rows, r = [], 0
            for i, state_items in zip(members, items):
                answers[i] = a._decode_answers(logits, act_p, state_items, ids, internal, r)
                for j, (qid, it) in enumerate(zip(ids, state_items)):
                    k = len(it["markers"])
                    row = {"state": i} if numbered else {}
                    row.update({
                        "qid": qid, "qtype": it["qtype"],
                        "input_ids": [int(x) for x in it["ids"]],
                        "markers": [int(x) for x in it["markers"]],
                        "logits": [float(x) for x in np.asarray(logits[r + j, :k], dtype=np.float32)],
                        "act_logits": [float(x) for x in np.asarray(act[r + j], dtype=np.float32)],
                    })
                    rows.append(row)
                r += len(state_items)
            passes.append(rows)
        return passes, answers

    def record(self, line, status, text):
        """The passes of a 200 decision answer (checked to decode to its body), else None."""
        body = line.get("body")
        if status != 200 or not isinstance(body, dict) or not body.get("questions"):
            return None
        path = line.get("path", "/v1/systemone")
        resp = json.loads(text)
        questions = body["questions"]
        opts = {k: body[k] for k in ("max_len", "head_max_len") if body.get(k) is not None}
        if path == "/v1/systemone":
            states, results, batch_size, numbered = [body["state"]], [resp], None, False
        else:
            if body.get("sort_by_length"):
                return None
            states, results, numbered = body["states"], resp["results"], True
            batch_size = body.get("batch_size")
            width = body["max_len"] if isinstance(body.get("max_len"), int) else 512
            if len(states) * len(questions) * width > 131072:   # LAYA_MAX_BATCH_TOKENS chunking
                planned = max(1, min(len(states), (131072 // width) // len(questions)))
                batch_size = planned if batch_size is None else min(batch_size, planned)
        # The router runs one predict_batch per routed checkpoint, in order of first appearance.
        groups = {}
        for i, result in enumerate(results):
            groups.setdefault(result["routing"]["model"], []).append(i)
        passes, answers = [], {}
        for name, indices in groups.items():
            p, a = self.passes(name, states, indices, questions, opts, batch_size, numbered)
            passes += p
            answers.update(a)
        extra = ("x_jev_confidence", "low_confidence", "abstention", "abstention_threshold")
        for i, result in enumerate(results):
            got = json.loads(json.dumps(answers[i], ensure_ascii=False))
            want = {qid: {k: v for k, v in ans.items() if k not in extra}
                    for qid, ans in result["answers"].items()}
            if got != want:
                raise AssertionError("rows of %r do not give its answer (state %d)" % (line["id"], i))
        return passes


def record(port, rows, workload, out):
    with open(workload, encoding="utf-8") as f:
        lines = [json.loads(x) for x in f if x.strip()]
    records = []
    for line in lines:
        method, path, body, headers, rec = request_of(line)
        status, resp_headers, data = send(port, method, path, body, headers)
        text = data.decode("utf-8")
        kept = {k: TIMING.get(k, v) for k, v in resp_headers if k in TIMING or k in KEPT}
        entry = {"id": line.get("id"), "request": rec, "status": status, "headers": kept,
                 "body": text}
        passes = rows.record(line, status, text)
        if passes is not None:
            entry["rows"] = passes
        records.append(entry)
    write_jsonl(out, records)
    log("%s: %d requests" % (os.path.relpath(out), len(records)))


def long_cases():
    """predict_long calls: default and explicit windows, strides, list and dict states, a
    needle, one that fits one pass, a clamped window, a stride past the window, batching."""
    rng = random.Random(2301)

    def text(n):
        return " ".join(sentence(rng) for _ in range(n))

    qs = dict(QUESTIONS[:3])
    long_text = text(220)
    needle = text(70) + " The customer demands a refund of the duplicate charge today. " + text(70)
    conversation = [{"role": ("customer", "agent")[i % 2], "text": text(3)} for i in range(60)]
    document = {"part_%02d" % i: text(4) for i in range(40)}
    return [
        ("w01_default_window", {"state": long_text, "questions": qs}),
        ("w02_window_and_stride", {"state": long_text, "questions": qs, "window": 200, "stride": 120}),
        ("w03_needle", {"state": needle, "questions": {"refund": qs["refund"]}, "window": 128}),
        ("w04_list_state", {"state": conversation, "questions": {"dept": qs["dept"]}}),
        ("w05_dict_state", {"state": document, "questions": {"urgency": qs["urgency"]}, "window": 300}),
        ("w06_fits_one_pass", {"state": TEXTS["en"], "questions": qs}),
        ("w07_window_clamped", {"state": long_text, "questions": qs, "window": 5000}),
        ("w08_stride_too_long", {"state": long_text, "questions": qs, "window": 100, "stride": 150}),
        ("w09_batch_size", {"state": long_text, "questions": {"refund": qs["refund"]}, "window": 256,
                            "batch_size": 2}),
        ("w10_special_tokens", {"state": ("[SEP] [MASK] " + text(4) + "  ") * 60,
                                "questions": {"refund": qs["refund"]}, "window": 180}),
    ]


def long_references(checkpoint, out):
    import torch

    torch.set_num_threads(1)
    from laya.agent import Agent
    from laya.common import encode_text, serialize_state

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = Agent(checkpoint, device="cpu")
    seen = {}
    predict_batch = agent.predict_batch

    def spy(states, *a, **kw):     # the window texts predict_long scores
        seen.setdefault("windows", list(states))
        return predict_batch(states, *a, **kw)

    agent.predict_batch = spy
    lines = []
    for cid, call in long_cases():
        seen.clear()
        kwargs = {k: call[k] for k in ("window", "stride", "batch_size") if k in call}
        state_text = serialize_state(call["state"]).replace(agent.tok.mask_token, " ")
        rec = {"id": cid, "call": call,
               "state_tokens": len(encode_text(agent.tok, state_text, add_special_tokens=False)["input_ids"])}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = agent.predict_long(call["state"], call["questions"], **kwargs)
            rec["result"] = json.loads(json.dumps(result, ensure_ascii=False))
        except Exception as e:  # noqa: BLE001 -- upstream's error is the reference
            rec["error"] = {"type": type(e).__name__, "message": str(e)}
        if "windows" in seen:
            rec["windows"] = seen["windows"]
        lines.append(rec)
    write_jsonl(out, lines)
    log("%s: %d cases" % (os.path.relpath(out), len(lines)))


def references(data):
    parent = os.path.join(data, "checkpoints")
    for name in CHECKPOINTS:
        names = {n: name for n in ("english", "multilingual", "typed-decisions")}
        rows = Rows({n: os.path.join(parent, name) for n in names})
        out = os.path.join(data, "references", name)
        with Upstream(parent, names) as up:
            for workload in ("smoke", "short", "edge"):
                record(up.port, rows, os.path.join(data, "workloads", workload + ".jsonl"),
                       os.path.join(out, workload + ".jsonl"))
        long_references(os.path.join(parent, name), os.path.join(out, "long-windows.jsonl"))


# The router's configurations: reference file -> (workload, server environment). Each runs on
# a server of its own with the three checkpoints behind the three names (ROUTED).
ROUTED = {"english": "tiny-english", "multilingual": "tiny-multilingual-shape",
          "typed-decisions": "tiny"}
SERVERS = {
    "routing": ("routing", {}),
    "routing-auto-task": ("routing", {"LAYA_AUTO_TASK": "1"}),
    "routing-default-english": ("routing", {"LAYA_DEFAULT_MODEL": "english"}),
    # Preloading raises the cap to what it loaded, so this one evicts nothing.
    "lru-max-loaded-1": ("lru", {"LAYA_MAX_LOADED": "1"}),
    "lru-no-preload": ("lru", {"LAYA_PRELOAD": "0"}),
    "lru-no-preload-max-loaded-1": ("lru", {"LAYA_PRELOAD": "0", "LAYA_MAX_LOADED": "1"}),
    "lru-models-subset": ("lru", {"LAYA_MODELS": "english,typed"}),
    "corrupt-english": ("corrupt", {"LAYA_PRELOAD": "0"}),
}
# `corrupt-english` serves CORRUPT behind `english`: a copy of tiny-english whose
# model.safetensors is cut to its first CORRUPT_BYTES bytes (the test makes the same copy).
CORRUPT = "tiny-corrupt"
CORRUPT_BYTES = 1000


def router(data):
    parent = os.path.join(data, "checkpoints")
    rows = Rows({n: os.path.join(parent, d) for n, d in ROUTED.items()})
    out = os.path.join(data, "references", "router")
    corrupt = os.path.join(parent, CORRUPT)
    shutil.copytree(os.path.join(parent, ROUTED["english"]), corrupt)
    with open(os.path.join(corrupt, "model.safetensors"), "r+b") as f:
        f.truncate(CORRUPT_BYTES)
    try:
        for ref, (workload, env) in SERVERS.items():
            names = dict(ROUTED, english=CORRUPT) if ref == "corrupt-english" else ROUTED
            with Upstream(parent, names, env) as up:
                record(up.port, rows, os.path.join(data, "workloads", workload + ".jsonl"),
                       os.path.join(out, ref + ".jsonl"))
    finally:
        shutil.rmtree(corrupt, ignore_errors=True)
    with open(os.path.join(out, "servers.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump({"LAYA_EXTRA_MODELS": ROUTED,
                   "corrupt": {"name": CORRUPT, "copy_of": ROUTED["english"], "bytes": CORRUPT_BYTES},
                   "servers": {ref: {"workload": w, "env": env} for ref, (w, env) in SERVERS.items()}},
                  f, indent=2, sort_keys=True)
        f.write("\n")


# ----------------------------------------------------------------------------- manifest

GENERATED = ("checkpoints", "workloads", "references")
# What the manifest covers: the generated files and the inputs they were made from.
LISTED = GENERATED + ("checkpoint-configs", "tokenizers")


def generated_files(data, tops=GENERATED):
    for top in tops:
        for root, _, files in os.walk(os.path.join(data, top)):
            for f in files:
                yield os.path.relpath(os.path.join(root, f), data)


def manifest(data):
    lines = []
    for rel in sorted(generated_files(data, LISTED)):
        with open(os.path.join(data, rel), "rb") as f:
            lines.append("%s  %s\n" % (hashlib.sha256(f.read()).hexdigest(), rel))
    with open(os.path.join(data, "MANIFEST.sha256"), "w", encoding="utf-8", newline="\n") as f:
        f.writelines(lines)
    log("manifest: %d files" % len(lines))


def everything(data):
    checkpoints(data)
    workloads(data)
    references(data)
    router(data)
    manifest(data)


def verify(data):
    with tempfile.TemporaryDirectory() as tmp:
        copy_of = os.path.join(tmp, "data")
        os.makedirs(copy_of)
        for keep in ("checkpoint-configs", "tokenizers"):
            shutil.copytree(os.path.join(data, keep), os.path.join(copy_of, keep))
        os.makedirs(os.path.join(copy_of, "workloads"))
        shutil.copyfile(os.path.join(data, "workloads", "edge.jsonl"),
                        os.path.join(copy_of, "workloads", "edge.jsonl"))
        everything(copy_of)
        differ = [rel for rel in sorted(generated_files(data))
                  if not os.path.exists(os.path.join(copy_of, rel))
                  or not filecmp.cmp(os.path.join(data, rel), os.path.join(copy_of, rel), shallow=False)]
        extra = sorted(set(generated_files(copy_of)) - set(generated_files(data)))
        if differ or extra:
            raise SystemExit("differ: %s; only in the rebuild: %s" % (differ, extra))
        log("verify: every generated file rebuilt byte for byte")


def log(msg):
    print("[regen] " + msg, file=sys.stderr, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["checkpoints", "workloads", "references", "router", "all",
                                     "manifest", "verify"])
    ap.add_argument("--data", default=DEFAULT_DATA)
    args = ap.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    data = os.path.abspath(args.data)
    {"checkpoints": checkpoints, "workloads": workloads, "references": references, "router": router,
     "all": everything, "manifest": manifest, "verify": verify}[args.what](data)


if __name__ == "__main__":
    main()

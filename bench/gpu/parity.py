"""Answers of several contenders against a reference, by the engine issue's f16 rule.

    python3 bench/gpu/parity.py REF.jsonl NAME=FILE.jsonl ... > parity.json

Each file has lines {"id", "result"} (bench/gpu/upstream_gpu.py --answers, or
bench/gpu/served.py --answers, whose result is the HTTP body). For every request and question,
every probability (a noul answer counts as [1 - p, p]) is compared with the reference's:
reported are the max and p99 absolute error, how many exceed 1e-2, and choice flips (a flip
is allowed only where the reference's top two probabilities are within 0.02).
"""
import json
import sys


def probs(ans):
    p = ans.get("probabilities")
    if isinstance(p, dict):
        return [float(v) for v in p.values()]
    n = float(ans["noul"])
    return [1.0 - n, n]


def load(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        if line.strip():
            row = json.loads(line)
            res = row["result"]
            out[row["id"]] = res
    return out


def compare(ref, got):
    errs, flips, bad_flips, missing = [], 0, 0, 0
    for rid, r in ref.items():
        g = got.get(rid)
        if g is None or "answers" not in g:
            missing += 1
            continue
        for qid, ra in r["answers"].items():
            ga = g["answers"].get(qid)
            if ga is None:
                missing += 1
                continue
            pr, pg = probs(ra), probs(ga)
            if len(pr) != len(pg):
                missing += 1
                continue
            errs.extend(abs(a - b) for a, b in zip(pr, pg))
            if "choice" in ra and ra.get("choice") != ga.get("choice"):
                flips += 1
                top = sorted(pr, reverse=True)
                if top[0] - (top[1] if len(top) > 1 else 0.0) > 0.02:
                    bad_flips += 1
    errs.sort()
    return {
        "requests": len(ref), "numbers": len(errs), "missing": missing,
        "max_abs_err": errs[-1] if errs else None,
        "p99_abs_err": errs[round((len(errs) - 1) * 0.99)] if errs else None,
        "median_abs_err": errs[len(errs) // 2] if errs else None,
        "over_1e-2": sum(e > 1e-2 for e in errs),
        "choice_flips": flips, "flips_outside_ties": bad_flips,
        "pass": bool(errs) and missing == 0 and errs[-1] <= 1e-2 and bad_flips == 0,
    }


def main():
    ref = load(sys.argv[1])
    report = {"reference": sys.argv[1], "contenders": {}}
    for spec in sys.argv[2:]:
        name, path = spec.split("=", 1)
        try:
            report["contenders"][name] = compare(ref, load(path))
        except FileNotFoundError:
            report["contenders"][name] = {"missing_file": path}
        c = report["contenders"][name]
        print("%-22s max %s p99 %s over1e-2 %s flips %s pass %s" % (
            name, c.get("max_abs_err"), c.get("p99_abs_err"), c.get("over_1e-2"), c.get("choice_flips"),
            c.get("pass")), file=sys.stderr)
    print(json.dumps(report))


if __name__ == "__main__":
    main()

"""Turns bench JSON reports into a Markdown write-up with machine, commit and command."""
import argparse
import json
import os
import platform
import subprocess


def machine():
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return "%s, %d cores, %.0f GiB, %s" % (cpu, os.cpu_count(), mem, platform.platform())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--title", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("reports", nargs="+")
    args = ap.parse_args()
    reports = [json.load(open(p)) for p in args.reports]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
    print("# %s\n" % args.title)
    print("- machine: %s" % machine())
    print("- commit: %s%s" % (commit or "uncommitted", " (with uncommitted changes)" if dirty else ""))
    print("- command: `%s`\n" % args.command)
    print("| contender | precision | device | load (s) | peak RSS (MiB) |")
    print("|---|---|---|---|---|")
    for r in reports:
        print("| %s | %s | %s | %.1f | %.0f |" % (r["contender"], r["precision"], r["device"], r["load_ms"] / 1e3, r["peak_rss_mib"] or 0))
    shapes = [s["shape"] for s in reports[0]["shapes"]]
    print("\nTime per request (wall, in-process, ms):\n")
    print("| shape | input tokens | " + " | ".join("%s median / p99" % r["contender"].split(" (")[0] for r in reports) + " |")
    print("|---|---|" + "---|" * len(reports))
    for sh in shapes:
        cells = []
        tokens = ""
        for r in reports:
            s = next((x for x in r["shapes"] if x["shape"] == sh), None)
            if s:
                tokens = s["input_tokens"]
                cells.append("%.0f / %.0f (n=%d)" % (s["median_ms"], s["p99_ms"], s["runs"]))
            else:
                cells.append("-")
        print("| %s | %s | %s |" % (sh, tokens, " | ".join(cells)))
    upstream = next((r for r in reports if r["contender"].startswith("upstream")), None)
    if upstream is None:
        return
    for r in reports:
        if r is upstream:
            continue
        print("\nRatio upstream / %s (median, >1 means %s is faster):\n" % (r["contender"], r["contender"]))
        for sh in shapes:
            a = next((x for x in r["shapes"] if x["shape"] == sh), None)
            b = next((x for x in upstream["shapes"] if x["shape"] == sh), None)
            if a and b:
                print("- %s: %.2fx" % (sh, b["median_ms"] / a["median_ms"]))


if __name__ == "__main__":
    main()

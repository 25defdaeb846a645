"""Turns bench JSON reports into a Markdown write-up with machine, commit and command."""
import argparse
import json
import os
import platform
import statistics
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


def merge(reports):
    """One report per contender: the reports of one contender's rounds (in the order given)
    become one whose median is the median of the rounds' medians, with those kept in
    `round_medians`, p99 the worst round's, load the median round's and peak RSS the largest."""
    order, by = [], {}
    for r in reports:
        if r["contender"] not in by:
            order.append(r["contender"])
            by[r["contender"]] = []
        by[r["contender"]].append(r)
    merged = []
    for name in order:
        rounds = by[name]
        m = dict(rounds[0])
        m["rounds"] = len(rounds)
        m["load_ms"] = statistics.median(r["load_ms"] for r in rounds)
        m["peak_rss_mib"] = max(r["peak_rss_mib"] or 0 for r in rounds)
        names = []
        for r in rounds:
            names += [s["shape"] for s in r["shapes"] if s["shape"] not in names]
        shapes = []
        for shape in names:
            # By round, None where a round lacks the shape, so rounds pair up by index.
            by_round = [next((s for s in r["shapes"] if s["shape"] == shape), None) for r in rounds]
            per = [s for s in by_round if s]
            shapes.append(dict(
                per[0],
                runs=sum(s["runs"] for s in per),
                median_ms=statistics.median(s["median_ms"] for s in per),
                p99_ms=max(s["p99_ms"] for s in per),
                min_ms=min(s["min_ms"] for s in per),
                round_medians=[s and s["median_ms"] for s in by_round],
            ))
        m["shapes"] = shapes
        merged.append(m)
    return merged


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--title", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("reports", nargs="+")
    args = ap.parse_args()
    # Several reports of one contender are its rounds, run in turn with the other contenders'
    # so that a slower minute of the machine falls on all of them.
    reports = merge([json.load(open(p)) for p in args.reports])
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
    shapes = []
    for r in reports:
        shapes += [s["shape"] for s in r["shapes"] if s["shape"] not in shapes]
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
                line = "- %s: %.2fx" % (sh, b["median_ms"] / a["median_ms"])
                ra, rb = a.get("round_medians", []), b.get("round_medians", [])
                if len(ra) > 1 and len(ra) == len(rb):
                    line += " (each round: %s)" % ", ".join(
                        "%.2fx" % (y / x) if x and y else "-" for x, y in zip(ra, rb))
                print(line)


if __name__ == "__main__":
    main()

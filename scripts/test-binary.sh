#!/usr/bin/env bash
# Builds a crate's integration test binary (`tests/tests.rs`, one per crate) and prints its
# path, taken from cargo's own report: the file name carries a hash that only cargo knows.
# Build errors show on stderr, and the script then fails.
#
# Usage: scripts/test-binary.sh <cargo test options...>   e.g. --release -p laya-cuda
set -euo pipefail
cargo test "$@" --test tests --no-run --message-format=json |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])' | tail -n 1

#!/usr/bin/env bash
# Builds the venv regen.py runs in: CPython 3.11 with upstream laya 0.4.15 and the exact
# package set of requirements.lock, from PyPI (about 4 GB: torch brings its CUDA wheels, though
# the fixtures are made on the CPU). Prints the venv's python.
#   VENV=/path/to/venv crates/laya-fixtures/oracle/setup.sh    (default: .fixture-venv in the repo)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
venv=${VENV:-$root/.fixture-venv}
python=${PYTHON:-python3.11}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip >&2
  "$venv/bin/pip" install --quiet -r "$here/requirements.lock" >&2
fi
"$venv/bin/python" -c 'import laya, torch, transformers; assert laya.__version__ == "0.4.15", laya.__version__' >&2
echo "$venv/bin/python"

#!/usr/bin/env bash
# Prepares the Jev client tools the strict-mode tests drive (crates/sys1rust/tests/jev.rs):
# jevcompat (the conformance suite for Jev servers) and typesafe-sdk (Jev's official Python
# client), pinned with every dependency, in a virtual environment at target/jev-venv.
# It prints the environment's python on stdout; a run that finds it in place does nothing else.
#
# Usage: scripts/setup-jev.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/jev-venv
# The versions the results in results/jevcompat.md were measured with.
pins=(
  jevcompat==0.1.1 typesafe-sdk==0.7.5 annotated-types==0.8.0 anyio==4.16.0 h11==0.16.0
  httpcore2==2.16.2 httpx2==2.16.2 idna==3.20 packaging==26.4 pydantic==2.14.4
  pydantic_core==2.50.5 tenacity==9.2.1 truststore==0.10.5 typing-inspection==0.4.5
  typing_extensions==4.16.0
)
stamp=$venv/.pins
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${pins[*]}" ]; then
  echo "$PWD/$venv/bin/python"
  exit 0
fi
echo "setup-jev.sh: installing ${pins[0]} and ${pins[1]} into $venv" >&2
python3 -m venv --clear "$venv" >&2 || {
  echo "setup-jev.sh: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
  exit 1
}
"$venv/bin/pip" install --quiet --no-deps "${pins[@]}" >&2
"$venv/bin/python" -c 'import jevcompat, typesafe_sdk' >&2
echo "${pins[*]}" > "$stamp"
echo "$PWD/$venv/bin/python"

#!/usr/bin/env bash
# Downloads the wheels upstream laya-serve needs beyond what the GPU machine's Python has (torch,
# transformers, tokenizers, safetensors, numpy, huggingface_hub), for its CPython 3.12 on
# manylinux x86_64, and packs them as .carry/upstream-wheels.tar.xz (wheels/*.whl), ready to
# go in a carry group: run.sh setup unpacks it into $STAGE/wheels.
#
#   bench/gpu/upstream-wheels.sh          (needs PyPI; PYTHON=... picks the pip to use)
#
# The pins are the oracle venv's (shared/oracle/requirements.lock), which laya[serve]==0.4.15
# was checked against: the device then runs the same server stack the spec was observed on.
# The set is what `laya.serve` imports at run time and does not get from torch/transformers:
# laya[serve] (fastapi, uvicorn, python-multipart) and their closure. anyio 4.16 and starlette
# 1.10 no longer need sniffio, and exceptiongroup is only for Python < 3.11.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
DEST=.carry/upstream-wheels
TAR=.carry/upstream-wheels.tar.xz
PINS=(
  fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 annotated-doc==0.0.7
  typing-inspection==0.4.5 typing-extensions==4.16.0 opentelemetry-api==1.45.2
  anyio==4.16.0 idna==3.20 click==8.5.1 h11==0.16.0
)
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

rm -rf "$DEST" "$TAR"
mkdir -p "$DEST/wheels"
# --no-deps: the list above is the whole set; the dry run below proves it is closed.
"$PY" -m pip download -q --no-deps "${TARGET[@]}" -d "$DEST/wheels" "${PINS[@]}"

# Resolves laya[serve]'s three requirements against these wheels alone, for the device's
# interpreter: fails if a dependency is missing, and lists anything carried but not needed.
report=$(mktemp)
"$PY" -m pip install -q --dry-run --ignore-installed --no-index --find-links "$DEST/wheels" \
  "${TARGET[@]}" --target "$(mktemp -d)" --report "$report" fastapi uvicorn python-multipart
"$PY" - "$report" "$DEST/wheels" <<'EOF'
import json, os, sys
need = {i["metadata"]["name"].lower().replace("_", "-") for i in json.load(open(sys.argv[1]))["install"]}
have = {f.split("-")[0].lower().replace("_", "-") for f in os.listdir(sys.argv[2]) if f.endswith(".whl")}
print("resolved from the carried wheels alone:", " ".join(sorted(need)), file=sys.stderr)
if have - need:
    print("carried but not needed:", " ".join(sorted(have - need)), file=sys.stderr)
EOF
rm -f "$report"

tar -C "$DEST" -cJf "$TAR" wheels
ls "$DEST/wheels" >&2
echo "$TAR: $(du -h "$TAR" | cut -f1) ($(stat -c %s "$TAR") bytes, $(ls "$DEST/wheels" | wc -l) wheels)"

#!/usr/bin/env bash
# Fetches NVRTC, CUDA's run-time compiler, for laya-cuda's kernel compile test on machines
# without CUDA (CI): it needs no GPU, and compiling kernels.cu for sm_80 and sm_90 catches a
# broken kernel before any GPU sees it. Prints the directory holding libnvrtc.so.13.
#
# The pinned wheel (nvidia-cuda-nvrtc 13.0.88, the CUDA 13.0 of the GPU machines) is checked
# against its sha256 and unpacked into .nvrtc/ (git-ignored); a re-run does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
version=13.0.88
wheel=nvidia_cuda_nvrtc-$version-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl
sha256=ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575
dest=$repo/.nvrtc
say() { echo "setup-nvrtc: $*" >&2; }

[ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || { say "only for Linux x86_64"; exit 1; }
lib=$dest/nvidia/cu13/lib
if [ -f "$dest/.wheel-sha256" ] && [ "$(cat "$dest/.wheel-sha256")" = "$sha256" ] && [ -f "$lib/libnvrtc.so.13" ]; then
  echo "$lib"
  exit 0
fi
mkdir -p "$dest/wheels"
if [ ! -f "$dest/wheels/$wheel" ]; then
  say "downloading nvidia-cuda-nvrtc==$version"
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_12_x86_64 --dest "$dest/wheels" "nvidia-cuda-nvrtc==$version" >&2
fi
actual=$(sha256sum "$dest/wheels/$wheel" | cut -d' ' -f1)
[ "$actual" = "$sha256" ] || { say "sha256 mismatch for $wheel: $actual"; exit 1; }
rm -rf "$dest/nvidia"
python3 -m zipfile -e "$dest/wheels/$wheel" "$dest"
echo "$sha256" > "$dest/.wheel-sha256"
echo "$lib"

#!/usr/bin/env bash
# Runs the test suite the way CI does: prepares MLX (scripts/setup-mlx.sh), then
# `cargo test --workspace --release` with any extra arguments passed through, e.g.
#   scripts/test.sh -- --nocapture
#   MLX_FLAVOR=cuda13 scripts/test.sh --target-dir target/cuda
set -euo pipefail
cd "$(dirname "$0")/.."

# The packaging tests (crates/sys1rust/tests/install.rs) run the installer under dash, patch
# the test binary's rpath, lint the scripts and verify the systemd unit.
export SYS1_EXTRA_PACKAGES="${SYS1_EXTRA_PACKAGES:-patchelf shellcheck systemd dash wget}"
prebuilt=$(bash scripts/setup-mlx.sh)
# .cargo/config.toml already names the CPU wheel; any other flavor (metal on macOS, or
# MLX_FLAVOR=cuda13) is selected through the environment, unless the caller chose one.
case $prebuilt in
  "$PWD/.mlx/cpu/mlx") ;;
  *) export MLX_SYS_PREBUILT_DIR="${MLX_SYS_PREBUILT_DIR:-$prebuilt}" ;;
esac

# laya-cuda's kernels compile with NVRTC here too (no GPU needed); without it that one test
# says it skipped. Its GPU tests skip on machines without an NVIDIA GPU.
if nvrtc=$(bash scripts/setup-nvrtc.sh); then
  export LD_LIBRARY_PATH="$nvrtc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "test.sh: NVRTC unavailable; laya-cuda's kernel compile test will skip" >&2
fi

# jevcompat and Jev's Python client, pinned, for the strict-mode tests (tests/jev.rs).
SYS1_JEV_PYTHON=$(bash scripts/setup-jev.sh)
export SYS1_JEV_PYTHON

exec cargo test --workspace --release "$@"

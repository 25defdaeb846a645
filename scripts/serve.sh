#!/usr/bin/env bash
# Builds sys1rust from source (preparing MLX with scripts/setup-mlx.sh) and serves a model:
#   scripts/serve.sh                                  # Laya's three checkpoints, downloaded once
#   scripts/serve.sh --model crates/laya-fixtures/data/checkpoints/tiny --port 8000
# Arguments go to `sys1rust serve` (see `sys1rust serve --help`).
set -euo pipefail
cd "$(dirname "$0")/.."

prebuilt=$(bash scripts/setup-mlx.sh)
case $prebuilt in
  "$PWD/.mlx/cpu/mlx") ;;
  *) export MLX_SYS_PREBUILT_DIR="${MLX_SYS_PREBUILT_DIR:-$prebuilt}" ;;
esac
cargo build --release -q -p sys1rust
exec target/release/sys1rust serve "$@"

#!/usr/bin/env bash
# Builds sys1rust for Linux on 64-bit Arm (aarch64-unknown-linux-gnu) on an x86-64 Debian or
# Ubuntu host, and runs laya-mlx's test binary (the fixture parity suites, the host layers,
# int8, checkpoint loading) under qemu's user-mode emulation, against the Arm mlx-cpu wheel
# and Debian's Arm OpenBLAS. This keeps the Arm build and its answers from regressing on
# machines without an Arm CPU; it measures no speed.
#
# Usage: scripts/test-aarch64.sh [test-filter...]   (arguments go to the test binary)
# Needs root or sudo for the packages: the arm64 architecture is added to dpkg, then
# g++-aarch64-linux-gnu, qemu-user, and the arm64 glibc, OpenBLAS, libstdc++ and libgfortran.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'test-aarch64: %s\n' "$*" >&2; }

[ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || {
  say "this cross build runs on Linux x86-64 (on an Arm host, scripts/test.sh tests natively)"
  exit 2
}

# The arm64 architecture first, so that setup-mlx.sh installs the Arm libraries with the rest
# (SYS1_EXTRA_PACKAGES below); a new architecture needs fresh package lists.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  say "adding the arm64 architecture"
  "${sudo[@]}" dpkg --add-architecture arm64
  "${sudo[@]}" apt-get update -qq >&2
fi
rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu ||
  rustup target add aarch64-unknown-linux-gnu >&2

target=aarch64-unknown-linux-gnu
multiarch=/usr/lib/aarch64-linux-gnu
MLX_SYS_PREBUILT_DIR=$(
  SYS1_EXTRA_PACKAGES="g++-aarch64-linux-gnu qemu-user libc6:arm64 libopenblas0-pthread:arm64 libstdc++6:arm64 libgfortran5:arm64" \
    MLX_ARCH=aarch64 bash scripts/setup-mlx.sh cpu
)
export MLX_SYS_PREBUILT_DIR
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# The cross linker searches its own sysroot only; the Arm OpenBLAS is a multiarch package.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C link-arg=-L$multiarch -C link-arg=-Wl,-rpath-link,$multiarch"
export BINDGEN_EXTRA_CLANG_ARGS_aarch64_unknown_linux_gnu=--sysroot=/usr/aarch64-linux-gnu
# qemu finds the Arm loader and libraries where Debian's multiarch packages put them
# (/lib/ld-linux-aarch64.so.1, /lib/aarch64-linux-gnu). Not QEMU_LD_PREFIX: the cross
# toolchain's own glibc there, mixed with the multiarch libraries, hangs the first thread.
unset QEMU_LD_PREFIX

say "building sys1rust and laya-mlx's tests for $target in target/aarch64"
cross=(--release --locked --target "$target" --target-dir target/aarch64)
cargo build "${cross[@]}" -p sys1rust
tests=$(scripts/test-binary.sh "${cross[@]}" -p laya-mlx)
[ -n "$tests" ] || {
  say "cargo built no laya-mlx test binary"
  exit 1
}

bin=target/aarch64/$target/release/sys1rust
say "$(qemu-aarch64 "$bin" --version)"

# The Arm server, on the tiny fixture checkpoint, must answer smoke's recorded requests with
# upstream's response bodies, byte for byte.
fixtures=crates/laya-fixtures/data
work=$(mktemp -d)
qemu-aarch64 "$bin" serve --model "$fixtures/checkpoints/tiny" --port 0 >"$work/ready" 2>"$work/serve.log" &
server=$!
# `|| true`: under `set -e` a failing command in the trap would become the script's status.
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 1200); do
  [ -s "$work/ready" ] || ! kill -0 "$server" 2>/dev/null && break
  sleep 0.1
done
[ -s "$work/ready" ] || {
  cat "$work/serve.log" >&2
  say "the Arm server did not start"
  exit 1
}
python3 - "$work/ready" "$fixtures/references/tiny/smoke.jsonl" <<'PY'
import json, sys, urllib.error, urllib.request
address = json.loads(open(sys.argv[1]).readline())["address"]
checked = 0
for line in open(sys.argv[2]):
    ref = json.loads(line)
    req = ref["request"]
    call = urllib.request.Request(f"http://{address}{req['path']}", method=req["method"],
                                  data=json.dumps(req["body"]).encode(),
                                  headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(call, timeout=120) as resp:
            status, body = resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read().decode()
    if (status, body) != (ref["status"], ref["body"]):
        sys.exit(f"{ref['id']}: {status} {body}\nupstream: {ref['status']} {ref['body']}")
    checked += 1
print(f"test-aarch64: the Arm server gave upstream's bodies for smoke's {checked} requests", file=sys.stderr)
PY
kill "$server"
wait "$server" || true

say "running laya-mlx's tests under qemu-aarch64"
cd crates/laya-mlx
qemu-aarch64 "$tests" --test-threads 2 "$@"

#!/usr/bin/env bash
# Runs install.sh the way `curl ... | sh` does (under dash where it is installed, as on Debian)
# against stand-in releases published as file:// URLs, with a temporary HOME and stand-ins for
# uname, systemctl, launchctl and the bundle's binary: no network, no cargo, no service
# manager, nothing outside a temporary directory. crates/sys1rust/tests/install.rs runs the
# real bundle end to end; this covers what that needs a real failure for:
#   - a latest SHA256SUMS that lists two versions for the platform is refused (not the first
#     line taken), --version picks its own, and build-bundle.sh --sums hashes this version's
#     tarballs only;
#   - a release whose binary cannot start leaves the release before it linked and in place;
#   - an update where `systemctl --user` cannot reach a user manager says what to run;
#   - --service copies the exported HF_* and proxy settings the download uses into the
#     options file (the service's only source), never a token, and refuses a value it cannot
#     copy;
#   - macOS: bootstrap is retried while the booted-out job is still stopping;
#   - the NVIDIA driver's major version from /sys/module/nvidia/version and from both
#     wordings of /proc/driver/nvidia/version;
#   - the service files wait longer than serve's drain before SIGKILL.
# Needs curl (file:// URLs), tar, gzip and sha256sum or shasum. Exits non-zero after the
# checks when any failed.
#
# Usage: packaging/test-install.sh   (scripts/check-deploy.sh runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
installer=$repo/install.sh

for tool in curl tar gzip; do
  command -v "$tool" >/dev/null || {
    echo "test-install: $tool is needed" >&2
    exit 1
  }
done
shell='sh'
if command -v dash >/dev/null; then shell=dash; fi
if command -v sha256sum >/dev/null; then sum=(sha256sum); else sum=(shasum -a 256); fi

work=$(mktemp -d "${TMPDIR:-/tmp}/sys1rust-test-install.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
failures=0
fail() {
  echo "  FAIL $*"
  failures=$((failures + 1))
}
ok() { echo "  ok   $*"; }

# A release bundle, sys1rust-$1-$2.tar.gz in directory $3, whose bin/sys1rust answers
# --version (or, with $4 = broken, fails as a binary missing a library does) and, for `pull`,
# writes the download settings it sees to $HOME/pull.env.
bundle() {
  local version=$1 platform=$2 to=$3 kind=${4:-good} stage
  stage=$(mktemp -d "$work/stage.XXXXXX")
  mkdir -p "$stage/sys1rust-$version-$platform/bin" "$to"
  if [ "$kind" = broken ]; then
    printf '#!/bin/sh\necho "sys1rust: error while loading shared libraries: libopenblas.so.0: cannot open shared object file" >&2\nexit 127\n' \
      >"$stage/sys1rust-$version-$platform/bin/sys1rust"
  else
    cat >"$stage/sys1rust-$version-$platform/bin/sys1rust" <<EOF
#!/bin/sh
case \$1 in
  --version) echo "sys1rust $version (commit test)" ;;
  pull)
    for v in HF_HOME HF_HUB_CACHE HF_ENDPOINT HTTPS_PROXY HF_TOKEN; do
      eval "printf '%s=%s\\n' \$v \"\\\${\$v-}\""
    done >"\$HOME/pull.env"
    ;;
esac
EOF
  fi
  chmod 755 "$stage/sys1rust-$version-$platform/bin/sys1rust"
  echo "$version" >"$stage/sys1rust-$version-$platform/VERSION"
  tar -C "$stage" -czf "$to/sys1rust-$version-$platform.tar.gz" "sys1rust-$version-$platform"
  rm -rf "$stage"
}

# SHA256SUMS in directory $1 over the tarballs named after it.
sums() {
  local dir=$1
  shift
  (cd "$dir" && "${sum[@]}" "$@" >SHA256SUMS)
}

# Stand-ins on PATH: uname (Linux x86_64, or what $work/<home>/uname.txt says), systemctl
# (logs; `show-environment` fails when no-user-manager exists) and launchctl (a job that,
# once booted out, takes 2 s to stop; bootstrap fails while it does, as launchd's does).
new_home() {
  local h=$work/$1
  mkdir -p "$h/home" "$h/fakes" "$h/tmp"
  echo "Linux x86_64" >"$h/uname.txt"
  cat >"$h/fakes/uname" <<EOF
#!/bin/sh
set -- \$(cat "$h/uname.txt") "\$1"
case \$3 in -m) echo "\$2" ;; *) echo "\$1" ;; esac
EOF
  cat >"$h/fakes/systemctl" <<EOF
#!/bin/sh
echo "\$*" >>"$h/systemctl.log"
case " \$* " in *" show-environment "*) if [ -f "$h/no-user-manager" ]; then exit 1; fi ;; esac
exit 0
EOF
  cat >"$h/fakes/launchctl" <<EOF
#!/bin/sh
echo "\$*" >>"$h/launchctl.log"
now=\$(date +%s)
st=\$(cat "$h/launchctl.state" 2>/dev/null || true)
case \$st in "stopping "*) if [ "\$now" -ge "\${st#stopping }" ]; then st=; : >"$h/launchctl.state"; fi ;; esac
case \$1 in
  bootout) if [ "\$st" = loaded ]; then echo "stopping \$((now + 2))" >"$h/launchctl.state"; fi ;;
  print) if [ -z "\$st" ]; then echo "Could not find service" >&2; exit 113; fi ;;
  bootstrap)
    if [ -n "\$st" ]; then echo "Bootstrap failed: 5: Input/output error" >&2; exit 5; fi
    echo loaded >"$h/launchctl.state"
    ;;
esac
exit 0
EOF
  chmod 755 "$h/fakes/"*
  echo "$h"
}

# Runs install.sh for home directory $1 with releases under file://$2; then the arguments:
# NAME=value pairs for its environment (over SYS1_VARIANT=cpu), then `--`, then install.sh's
# arguments. Leaves
# $1/out, $1/err and $1/rc.
install_sh() {
  local h=$1 www=$2
  shift 2
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    vars+=("$1")
    shift
  done
  shift
  set +e
  env -i HOME="$h/home" PATH="$h/fakes:/usr/bin:/bin:/usr/sbin:/sbin" TMPDIR="$h/tmp" \
    SHELL=/bin/bash SYS1_BASE_URL="file://$www" SYS1_VARIANT=cpu "${vars[@]}" \
    "$shell" "$installer" "$@" >"$h/out" 2>"$h/err"
  echo $? >"$h/rc"
  set -e
}

rc_of() { cat "$1/rc"; }
link_of() { readlink "$1/home/.local/bin/sys1rust" 2>/dev/null || echo "(no link)"; }
installed() {
  local d names=()
  for d in "$1"/home/.local/share/sys1rust/*; do [ -e "$d" ] && names+=("${d##*/}"); done
  echo "${names[*]}"
}
said() { grep -qF -- "$2" "$1/out" "$1/err"; }
show() { sed 's/^/         | /' "$1/out" "$1/err" 2>/dev/null || true; }

P=linux-x86_64-cpu
echo "install.sh: $shell, stand-in releases and service managers"

# --- 1. SHA256SUMS with two versions ---------------------------------------------------------
www=$work/www
bundle 0.9.0 $P "$www/download/v0.9.0"
bundle 1.0.0 $P "$www/download/v1.0.0"
bundle 1.0.0 macos-arm64 "$www/download/v1.0.0"
bundle 2.0.0 $P "$www/download/v2.0.0" broken
bundle 9.9.9 $P "$www/download/v9.9.9"
# As a build that hashed every tarball of dist/ wrote it: the older version's line first.
cp "$www/download/v0.9.0/sys1rust-0.9.0-$P.tar.gz" "$www/download/v1.0.0/"
sums "$www/download/v1.0.0" "sys1rust-0.9.0-$P.tar.gz" "sys1rust-1.0.0-$P.tar.gz" "sys1rust-1.0.0-macos-arm64.tar.gz"
sums "$www/download/v0.9.0" "sys1rust-0.9.0-$P.tar.gz"
sums "$www/download/v2.0.0" "sys1rust-2.0.0-$P.tar.gz"
sums "$www/download/v9.9.9" "sys1rust-9.9.9-$P.tar.gz"
mkdir -p "$www/latest/download"
cp "$www/download/v1.0.0/SHA256SUMS" "$www/latest/download/SHA256SUMS"

h=$(new_home latest)
install_sh "$h" "$www" --
if [ "$(rc_of "$h")" = 0 ] || ! said "$h" "lists more than one version for $P (0.9.0 1.0.0)" || [ -e "$h/home/.local/bin/sys1rust" ]; then
  fail "latest: a SHA256SUMS listing 0.9.0 and 1.0.0 for $P was not refused (installed: $(installed "$h"))"
  show "$h"
else
  ok "latest: a SHA256SUMS listing two versions for $P is refused, nothing installed"
fi
install_sh "$h" "$www" -- --version 1.0.0
if [ "$(rc_of "$h")" != 0 ] || [ "$(link_of "$h")" != "$h/home/.local/share/sys1rust/1.0.0/bin/sys1rust" ]; then
  fail "--version 1.0.0 from the same SHA256SUMS did not install 1.0.0 ($(link_of "$h"))"
  show "$h"
else
  ok "--version 1.0.0 picks its tarball from that SHA256SUMS"
fi

# build-bundle.sh --sums: this version's tarballs only.
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
dist=$work/dist
mkdir -p "$dist"
for t in "0.0.1-$P" "$version-$P" "$version-macos-arm64" "$version-rc.1-$P"; do
  echo "$t" | gzip >"$dist/sys1rust-$t.tar.gz"
done
if ! packaging/build-bundle.sh --sums --out "$dist" >"$work/sums.out" 2>&1; then
  fail "build-bundle.sh --sums: $(cat "$work/sums.out")"
else
  listed=$(sed 's/^[0-9a-f]* [ *]*//' "$dist/SHA256SUMS" | sort | tr '\n' ' ')
  want="sys1rust-$version-$P.tar.gz sys1rust-$version-macos-arm64.tar.gz "
  if [ "$listed" != "$want" ]; then
    fail "build-bundle.sh --sums listed '$listed', not '$want'"
  else
    ok "build-bundle.sh --sums hashes $version's tarballs, not 0.0.1's or a pre-release's"
  fi
fi

# --- 2. a release that cannot start ----------------------------------------------------------
h=$(new_home rollback)
install_sh "$h" "$www" -- --version 1.0.0
install_sh "$h" "$www" -- --version 2.0.0
if [ "$(rc_of "$h")" = 0 ] || [ "$(link_of "$h")" != "$h/home/.local/share/sys1rust/1.0.0/bin/sys1rust" ] ||
  [ "$(installed "$h")" != 1.0.0 ] || ! said "$h" "sys1rust 1.0.0 stays installed" ||
  ! said "$h" "libopenblas.so.0" || ! "$h/home/.local/bin/sys1rust" --version >/dev/null 2>&1; then
  fail "an update to a release that cannot start did not keep 1.0.0 (link $(link_of "$h"), installed: $(installed "$h"), rc $(rc_of "$h"))"
  show "$h"
else
  ok "an update whose binary cannot start keeps the previous release linked and in place, and says so"
fi
# The same version again, now broken: the copy installed before stays.
www_broken=$work/www-broken
bundle 1.0.0 $P "$www_broken/download/v1.0.0" broken
sums "$www_broken/download/v1.0.0" "sys1rust-1.0.0-$P.tar.gz"
install_sh "$h" "$www_broken" -- --version 1.0.0
if [ "$(rc_of "$h")" = 0 ] || [ "$(installed "$h")" != 1.0.0 ] || ! "$h/home/.local/bin/sys1rust" --version >/dev/null 2>&1; then
  fail "a reinstall whose binary cannot start did not keep the working copy (rc $(rc_of "$h"))"
  show "$h"
else
  ok "a reinstall whose binary cannot start keeps the copy installed before"
fi
# Nothing to go back to: the install stays (for the missing library to be added), non-zero.
h=$(new_home first-broken)
install_sh "$h" "$www" -- --version 2.0.0
if [ "$(rc_of "$h")" = 0 ] || [ "$(link_of "$h")" != "$h/home/.local/share/sys1rust/2.0.0/bin/sys1rust" ] || ! said "$h" "but it cannot start"; then
  fail "a first install that cannot start: rc $(rc_of "$h"), link $(link_of "$h")"
  show "$h"
else
  ok "a first install that cannot start stays, with the hint, and fails"
fi

# --- 3. an update without a reachable user manager ----------------------------------------
h=$(new_home no-manager)
install_sh "$h" "$www" -- --version 1.0.0 --service
touch "$h/no-user-manager"
: >"$h/systemctl.log"
install_sh "$h" "$www" -- --version 9.9.9
if [ "$(rc_of "$h")" != 0 ] || ! said "$h" "systemctl --user daemon-reload && systemctl --user try-restart sys1rust.service" ||
  grep -q try-restart "$h/systemctl.log"; then
  fail "an update that cannot reach 'systemctl --user' does not say what to run (rc $(rc_of "$h"))"
  show "$h"
else
  ok "an update that cannot reach 'systemctl --user' says what to run"
fi

# --- 4. --service: the download's settings reach the service ------------------------------
h=$(new_home settings)
mkdir -p "$h/home/.config/sys1rust"
printf 'HF_ENDPOINT=https://hub.file.example\n' >"$h/home/.config/sys1rust/env"
install_sh "$h" "$www" HF_HOME="$h/hf" HTTPS_PROXY=http://proxy.example:3128 \
  https_proxy=http://user:pw@proxy.example:3128 HF_TOKEN=hf_secret HF_ENDPOINT=https://hub.shell.example \
  -- --version 1.0.0 --service
env_file=$h/home/.config/sys1rust/env
# What the service sees: its options file alone.
# shellcheck disable=SC2016 # expanded by that sh
service_view=$(env -i sh -c 'set -a; . "$1"; for v in HF_HOME HF_HUB_CACHE HF_ENDPOINT HTTPS_PROXY HF_TOKEN; do eval "printf \"%s=%s\n\" $v \"\${$v-}\""; done' sh "$env_file")
if [ "$(rc_of "$h")" != 0 ] || [ "$service_view" != "$(sed 's/^HF_TOKEN=.*/HF_TOKEN=/' "$h/home/pull.env" 2>/dev/null)" ] ||
  ! grep -qx "HF_HOME=$h/hf" "$env_file" || grep -q 'hf_secret\|user:pw' "$env_file" ||
  [ "$(grep -c '^HF_ENDPOINT=' "$env_file")" != 1 ] || ! said "$h" "HF_TOKEN is set here but not in" ||
  ! said "$h" "https_proxy names a proxy with credentials"; then
  fail "--service: the service's options file does not give it the download's settings (rc $(rc_of "$h"))"
  echo "         pull saw:     $(tr '\n' ' ' <"$h/home/pull.env" 2>/dev/null)"
  echo "         service sees: $(echo "$service_view" | tr '\n' ' ')"
  sed 's/^/         env | /' "$env_file"
  show "$h"
else
  ok "--service copies HF_HOME and HTTPS_PROXY into the options file (the file's HF_ENDPOINT wins; no token, no proxy password)"
fi
h=$(new_home settings-refused)
install_sh "$h" "$www" HF_HUB_CACHE="$h/a cache" -- --version 1.0.0 --service
if [ "$(rc_of "$h")" = 0 ] || ! said "$h" "set HF_HUB_CACHE there yourself" || grep -q enable "$h/systemctl.log"; then
  fail "--service with an HF_HUB_CACHE it cannot copy did not stop before the service (rc $(rc_of "$h"))"
  show "$h"
else
  ok "--service refuses a setting it cannot copy into the options file, before the service"
fi

# --- 5. macOS: bootstrap after a bootout that is still stopping ---------------------------
h=$(new_home macos)
echo "Darwin arm64" >"$h/uname.txt"
echo loaded >"$h/launchctl.state" # an agent from an earlier install, running
install_sh "$h" "$www" SYS1_VARIANT= -- --version 1.0.0 --service
if [ "$(rc_of "$h")" != 0 ] || [ "$(cat "$h/launchctl.state")" != loaded ] || [ "$(grep -c '^bootstrap ' "$h/launchctl.log")" -lt 2 ]; then
  fail "macOS: the LaunchAgent was not bootstrapped again after a bootout that takes 2 s (rc $(rc_of "$h"))"
  sed 's/^/         launchctl | /' "$h/launchctl.log" 2>/dev/null || true
  show "$h"
else
  ok "macOS: bootstrap is retried until the booted-out job has stopped"
fi

# --- 6. the NVIDIA driver's version -------------------------------------------------------
parse=$work/driver_major_of.sh
sed -n '/^driver_major_of() {/,/^}/p' "$installer" >"$parse"
mark=$failures
while IFS='|' read -r want text; do
  # shellcheck disable=SC2016 # expanded by that shell
  got=$(printf '%b\n' "$text" | "$shell" -c '. "$1"; driver_major_of' sh "$parse" 2>&1 || true)
  [ "$got" = "$want" ] || fail "driver version of '$text': '$got', not '$want'"
done <<'EOF'
580|580.65.06
535|NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.154.05  Thu Dec 28 15:37:48 UTC 2023\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)
580|NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Jul 15 01:30:47 UTC 2025\nGCC version:  gcc version 13.3.0
590|NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  590.44.01  Release Build  (dvs-builder@U22-I3-AE18-23-3)  Tue Nov 25 2025
470|NVRM version: NVIDIA UNIX aarch64 Kernel Module  470.256.02  Thu May  2 14:50:40 UTC 2024
EOF
[ "$failures" != "$mark" ] || ok "driver versions: /sys/module/nvidia/version, proprietary and open /proc wording, x86_64 and aarch64"

# --- 7. the service files wait out serve's drain -------------------------------------------
default_of() { sed -n "s/.*env = \"$1\", default_value_t = \([0-9.]*\).*/\1/p" crates/sys1rust/src/cli.rs; }
grace=$(default_of SYS1_SHUTDOWN_GRACE)
delay=$(default_of SYS1_DRAIN_DELAY)
need=$(awk -v g="${grace:-30}" -v d="${delay:-0}" 'BEGIN { printf "%d", g + d + 5 }')
plist=$(env -i HOME="$work" PATH=/usr/bin:/bin "$shell" "$installer" --print-service launchd)
unit=$(env -i HOME="$work" PATH=/usr/bin:/bin "$shell" "$installer" --print-service systemd)
exit_timeout=$(printf '%s\n' "$plist" | sed -n '/<key>ExitTimeOut<\/key>/{n;s/.*<integer>\([0-9]*\)<\/integer>.*/\1/p;}')
stop_timeout=$(printf '%s\n' "$unit" | sed -n 's/^TimeoutStopSec=\([0-9]*\)$/\1/p')
if [ -z "$exit_timeout" ] || [ "$exit_timeout" -lt "$need" ]; then
  fail "the LaunchAgent's ExitTimeOut '${exit_timeout:-none}' is below serve's drain (shutdown grace $grace + drain delay $delay + 5 s = $need; launchd's default is 20 s)"
else
  ok "LaunchAgent ExitTimeOut $exit_timeout >= $grace + $delay + 5"
fi
if [ -z "$stop_timeout" ] || [ "$stop_timeout" -lt "$need" ]; then
  fail "the systemd unit's TimeoutStopSec '${stop_timeout:-none}' is below serve's drain ($need s)"
else
  ok "systemd TimeoutStopSec $stop_timeout >= $grace + $delay + 5"
fi

if [ "$failures" != 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi

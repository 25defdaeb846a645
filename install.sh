#!/bin/sh
# Installs sys1rust for the current user, without sudo:
#   ~/.local/share/sys1rust/<version>/   the release bundle (binary, libmlx, licenses)
#   ~/.local/bin/sys1rust                a link to its binary
# and, with --service, a background service: a systemd user unit on Linux, a LaunchAgent on
# macOS, both rendered by render_service below from one set of values.
#
#   curl -fsSL https://github.com/sys1rust/sys1rust/releases/latest/download/install.sh | sh
#   curl -fsSL https://github.com/sys1rust/sys1rust/releases/latest/download/install.sh | sh -s -- --service
#   sh install.sh [--version X] [--service] [--uninstall]
#
# Options:
#   --version X      install release X (default: the latest)
#   --service        also install and (re)start the background service (`sys1rust serve`,
#                    options in ~/.config/sys1rust/env)
#   --uninstall      remove the service, the install and the link; keep downloaded models
#   --print-service systemd|launchd
#                    print the service file this installer would write, and exit
# Environment:
#   SYS1_VERSION     same as --version
#   SYS1_VARIANT     Linux x86-64 build: cpu or cuda13 (default: cuda13 when an NVIDIA
#                    driver >= 580 is present, else cpu)
#   SYS1_BASE_URL    where releases live (default https://github.com/sys1rust/sys1rust/releases):
#                    release X is <base>/download/vX/<file>; the latest one's SHA256SUMS is
#                    <base>/latest/download/SHA256SUMS (GitHub redirects it; a static server
#                    can hold a copy there), and the version is read from the tarball it names.
#
# Running it again installs the requested (or latest) release, removes the others and restarts
# a running service. It prints little on success and exits non-zero with a reason on failure.
set -eu

repo_url=https://github.com/sys1rust/sys1rust
base_url=${SYS1_BASE_URL:-$repo_url/releases}
base_url=${base_url%/}
version=${SYS1_VERSION:-}
action=install
service=0
label=io.github.sys1rust
unit_name=sys1rust.service
# The NVIDIA libraries the mlx-cuda-13 wheel requires (its Requires-Dist), quoted for a shell.
cuda_pip_packages="'nvidia-cudnn-cu13==9.*' nvidia-nccl-cu13 'nvidia-cublas==13.*' 'nvidia-cufft==12.*' 'nvidia-cuda-nvrtc==13.*' 'nvidia-cuda-runtime==13.*'"

say() { printf '%s\n' "$*"; }
warn() { printf 'sys1rust install: %s\n' "$*" >&2; }
die() {
  printf 'sys1rust install: error: %s\n' "$*" >&2
  exit 1
}

usage() { sed -n '2,/^set -eu/{/^set -eu/d;s/^# \{0,1\}//;p;}' "$0" 2>/dev/null || say "see $repo_url"; }

while [ $# -gt 0 ]; do
  case $1 in
    --version)
      [ $# -ge 2 ] || die "--version needs a value, e.g. --version 0.1.0"
      version=$2
      shift 2
      ;;
    --version=*) version=${1#*=} && shift ;;
    --service) service=1 && shift ;;
    --uninstall) action=uninstall && shift ;;
    --print-service)
      [ $# -ge 2 ] || die "--print-service needs systemd or launchd"
      action=print-service print_kind=$2
      shift 2
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
version=${version#v}

if [ -z "${HOME:-}" ] || [ ! -d "$HOME" ]; then die "HOME is not set to a directory"; fi
data_dir=$HOME/.local/share/sys1rust
bin_dir=$HOME/.local/bin
link=$bin_dir/sys1rust
config_dir=$HOME/.config/sys1rust
env_file=$config_dir/env
unit_dir=${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user
unit=$unit_dir/$unit_name
plist=$HOME/Library/LaunchAgents/$label.plist
log_file=$HOME/Library/Logs/sys1rust.log

# --- the service: one set of values, rendered as a systemd unit or a LaunchAgent -----------

xml_escape() { printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g'; }
# A path in a unit file: systemd expands %-specifiers, so % is doubled.
systemd_path() { printf '%s' "$1" | sed -e 's/%/%%/g'; }

render_service() {
  description="sys1rust: Laya System 1 decision models over HTTP"
  program=$link # the stable link, so an update needs no new service file
  command=serve # options come from the environment file (see 'sys1rust serve --help')
  restart_delay=5
  case $1 in
    systemd)
      case $HOME in
        *[[:space:]\"\\]*) die "a systemd unit cannot use this HOME ($HOME): it has spaces, quotes or backslashes" ;;
      esac
      cat <<EOF
# Written by the sys1rust installer ($repo_url); running it again rewrites this file.
# Options: NAME=value lines in $env_file. Logs: journalctl --user -u sys1rust
[Unit]
Description=$description
Documentation=$repo_url

[Service]
Type=simple
EnvironmentFile=-$(systemd_path "$env_file")
ExecStart=$(systemd_path "$program") $command
Restart=on-failure
RestartSec=$restart_delay
SyslogIdentifier=sys1rust

[Install]
WantedBy=default.target
EOF
      ;;
    launchd)
      # launchd cannot read an environment file itself: sh exports it, then execs the program.
      cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by the sys1rust installer ($repo_url); running it again rewrites this file. -->
<!-- $description. Options: NAME=value lines in the file that ProgramArguments names last. -->
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>$label</string>
  <key>ProgramArguments</key>
  <array>
    <string>/bin/sh</string>
    <string>-c</string>
    <string>set -a; if [ -f "\$1" ]; then . "\$1"; fi; set +a; exec "\$0" $command</string>
    <string>$(xml_escape "$program")</string>
    <string>$(xml_escape "$env_file")</string>
  </array>
  <key>RunAtLoad</key>
  <true/>
  <key>KeepAlive</key>
  <dict>
    <key>SuccessfulExit</key>
    <false/>
  </dict>
  <key>ThrottleInterval</key>
  <integer>$restart_delay</integer>
  <key>StandardOutPath</key>
  <string>$(xml_escape "$log_file")</string>
  <key>StandardErrorPath</key>
  <string>$(xml_escape "$log_file")</string>
</dict>
</plist>
EOF
      ;;
    *) die "unknown service kind '$1' (systemd or launchd)" ;;
  esac
}

write_env_file() {
  [ -f "$env_file" ] && return 0
  mkdir -p "$config_dir"
  cat >"$env_file" <<'EOF'
# Options for the sys1rust service, one NAME=value a line (quote values with spaces); restart
# the service after a change. 'sys1rust serve --help' lists them all, e.g.:
#SYS1_MODEL=typed-decisions
#LAYA_HOST=127.0.0.1
#LAYA_PORT=8000
#LAYA_API_KEY=a-long-secret
#SYS1_DEVICE=auto
#HF_HUB_OFFLINE=1
EOF
}

# Renders service file kind $1 into $2, atomically.
write_service_file() {
  mkdir -p "$(dirname "$2")"
  render_service "$1" >"$2.tmp.$$" || {
    rm -f "$2.tmp.$$"
    exit 1
  }
  mv -f "$2.tmp.$$" "$2"
}

systemd_user_ok() { command -v systemctl >/dev/null 2>&1 && systemctl --user show-environment >/dev/null 2>&1; }

# Installs (or rewrites) and (re)starts the service; with $1 = update, only rewrites the file
# of an installed service and restarts it if it is running.
service_apply() {
  case $os in
    Linux)
      if [ "$1" = update ]; then
        [ -f "$unit" ] || return 0
        write_service_file systemd "$unit"
        if systemd_user_ok; then
          systemctl --user daemon-reload
          systemctl --user try-restart "$unit_name"
        fi
        return 0
      fi
      systemd_user_ok || die "--service needs a systemd user manager, and 'systemctl --user' cannot reach one here (log in through a regular session such as ssh or a console, or set XDG_RUNTIME_DIR=/run/user/$(id -u))"
      write_env_file
      write_service_file systemd "$unit"
      systemctl --user daemon-reload
      systemctl --user enable --quiet "$unit_name"
      systemctl --user restart "$unit_name"
      say "Service started: systemctl --user status sys1rust; logs: journalctl --user -u sys1rust -f"
      say "Options: $env_file. To keep it running after you log out: loginctl enable-linger $(id -un)"
      ;;
    Darwin)
      domain=gui/$(id -u)
      if [ "$1" = update ]; then
        [ -f "$plist" ] || return 0
        write_service_file launchd "$plist"
        if launchctl print "$domain/$label" >/dev/null 2>&1; then
          launchctl kickstart -k "$domain/$label" >/dev/null
        fi
        return 0
      fi
      write_env_file
      mkdir -p "$(dirname "$log_file")"
      write_service_file launchd "$plist"
      launchctl bootout "$domain/$label" >/dev/null 2>&1 || true
      launchctl bootstrap "$domain" "$plist"
      say "Service started: launchctl print $domain/$label; log: $log_file"
      say "Options: $env_file"
      ;;
  esac
}

service_remove() {
  if [ -f "$unit" ] || [ -L "$unit_dir/default.target.wants/$unit_name" ]; then
    if systemd_user_ok; then
      systemctl --user disable --now --quiet "$unit_name" 2>/dev/null || true
    fi
    rm -f "$unit" "$unit_dir/default.target.wants/$unit_name"
    if systemd_user_ok; then systemctl --user daemon-reload || true; fi
  fi
  if [ -f "$plist" ]; then
    if command -v launchctl >/dev/null 2>&1; then
      launchctl bootout "gui/$(id -u)/$label" >/dev/null 2>&1 || true
    fi
    rm -f "$plist"
  fi
  rm -f "$log_file"
}

# --- platform ----------------------------------------------------------------------------

# The major version of the NVIDIA driver, or nothing when there is none.
nvidia_driver_major() {
  v=
  if [ -r /proc/driver/nvidia/version ]; then
    v=$(sed -n 's/.*Kernel Module[^0-9]*\([0-9][0-9]*\)\..*/\1/p' /proc/driver/nvidia/version | head -n 1)
  fi
  if [ -z "$v" ] && command -v nvidia-smi >/dev/null 2>&1; then
    v=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 | cut -d. -f1)
    case $v in
      '' | *[!0-9]*) v=0 ;; # a driver we cannot read: let the CUDA build say what it needs
    esac
  fi
  printf '%s' "$v"
}

detect_platform() {
  os=$(uname -s)
  arch=$(uname -m)
  # A shell under Rosetta reports x86_64 on Apple silicon.
  if [ "$os-$arch" = Darwin-x86_64 ] && [ "$(sysctl -n sysctl.proc_translated 2>/dev/null || true)" = 1 ]; then
    arch=arm64
  fi
  case $os-$arch in
    Linux-x86_64 | Linux-amd64)
      variant=${SYS1_VARIANT:-}
      if [ -z "$variant" ]; then
        variant=cpu
        driver=$(nvidia_driver_major)
        if [ -n "$driver" ]; then
          if [ "$driver" -ge 580 ] || [ "$driver" -eq 0 ]; then
            variant=cuda13
          else
            warn "NVIDIA driver $driver is older than 580 (CUDA 13): installing the CPU build (SYS1_VARIANT=cuda13 overrides)"
          fi
        fi
      fi
      case $variant in
        cpu | cuda13) ;;
        *) die "SYS1_VARIANT must be cpu or cuda13, not '$variant'" ;;
      esac
      platform=linux-x86_64-$variant
      ;;
    Darwin-arm64)
      case ${SYS1_VARIANT:-metal} in
        metal) ;;
        *) die "SYS1_VARIANT must be empty or metal on macOS, not '$SYS1_VARIANT'" ;;
      esac
      platform=macos-arm64
      ;;
    *)
      die "there is no sys1rust release for $os $arch; releases exist for Linux x86-64 (CPU, or NVIDIA GPUs with CUDA 13) and macOS on Apple silicon. To build from source, see $repo_url#build-from-source"
      ;;
  esac
}

# --- download and verify -----------------------------------------------------------------

# Downloads URL $1 to file $2; fails (with the tool's message) when it cannot.
download() {
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 2 -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    wget -q -O "$2" "$1"
  else
    die "curl or wget is needed to download sys1rust"
  fi
}

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then
    shasum -a 256 "$1" | cut -d' ' -f1
  else
    die "sha256sum or shasum is needed to verify the download"
  fi
}

# --- install -----------------------------------------------------------------------------

# Why a bundle's binary cannot start, and what to do about it.
missing_requirements_hint() {
  case $platform in
    linux-x86_64-cpu)
      say "The CPU build needs OpenBLAS (libopenblas.so.0) and glibc 2.35 or newer. Install OpenBLAS with"
      say "  Debian/Ubuntu: sudo apt-get install libopenblas0-pthread"
      say "  Fedora:        sudo dnf install openblas-pthreads"
      say "  Arch:          sudo pacman -S openblas"
      ;;
    linux-x86_64-cuda13)
      say "The CUDA build needs NVIDIA driver 580 or newer and the CUDA 13 libraries: cuBLAS 13, cuFFT 12,"
      say "NVRTC 13 and the CUDA 13 runtime headers, cuDNN 9 and NCCL 2. Either install them system-wide,"
      say "or let pip put them where sys1rust looks first:"
      say "  python3 -m pip install --target $data_dir/cuda $cuda_pip_packages"
      say "(or install the CPU build: SYS1_VARIANT=cpu)"
      ;;
  esac
}

install_release() {
  detect_platform
  if [ -e "$link" ] && [ ! -L "$link" ]; then
    die "$link exists and is not a link to a sys1rust install: move it away and run this again"
  fi
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/sys1rust-install.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  trap 'exit 130' INT TERM

  if [ -n "$version" ]; then
    sums_url=$base_url/download/v$version/SHA256SUMS
  else
    sums_url=$base_url/latest/download/SHA256SUMS
  fi
  if ! download "$sums_url" "$tmp/SHA256SUMS"; then
    if [ -n "$version" ]; then
      die "could not download $sums_url: is there a release $version? (the releases: $repo_url/releases)"
    fi
    die "could not download $sums_url"
  fi
  if [ -z "$version" ]; then
    version=$(sed -n "s/^[0-9a-fA-F]\{64\}[ *]*sys1rust-\(.*\)-$platform\.tar\.gz\$/\1/p" "$tmp/SHA256SUMS" | head -n 1)
    [ -n "$version" ] || die "the latest release ($sums_url) has no $platform build"
  fi
  case $version in
    '' | *[!0-9A-Za-z.+-]*) die "'$version' is not a release version" ;;
  esac
  name=sys1rust-$version-$platform
  tarball=$name.tar.gz
  expected=$(awk -v f="$tarball" '$2 == f || $2 == "*" f { print $1; exit }' "$tmp/SHA256SUMS")
  [ -n "$expected" ] || die "release $version has no $platform build ($sums_url does not list $tarball)"

  download "$base_url/download/v$version/$tarball" "$tmp/$tarball" ||
    die "could not download $base_url/download/v$version/$tarball"
  actual=$(sha256_of "$tmp/$tarball")
  [ "$actual" = "$expected" ] ||
    die "$tarball does not match SHA256SUMS (expected $expected, got $actual): refusing to install it"

  # Unpack beside the final place, then swap it in (an install that cannot start yet stays, so
  # that the libraries it lacks can be added; see missing_requirements_hint).
  mkdir -p "$data_dir"
  staging=$data_dir/.staging
  rm -rf "$staging"
  mkdir "$staging"
  tar -xzf "$tmp/$tarball" -C "$staging" || die "could not unpack $tarball"
  [ -x "$staging/$name/bin/sys1rust" ] || die "$tarball holds no $name/bin/sys1rust"
  if [ "$platform" = linux-x86_64-cuda13 ]; then
    # libmlx looks for pip's NVIDIA libraries in lib/nvidia/; they survive updates in cuda/.
    ln -s ../../cuda/nvidia "$staging/$name/lib/nvidia"
  fi
  dest=$data_dir/$version
  rm -rf "$data_dir/.previous"
  if [ -e "$dest" ]; then mv "$dest" "$data_dir/.previous"; fi
  mv "$staging/$name" "$dest"
  rm -rf "$staging" "$data_dir/.previous"

  # The link, replaced atomically.
  mkdir -p "$bin_dir"
  ln -s "$dest/bin/sys1rust" "$link.new.$$"
  mv -f "$link.new.$$" "$link"

  # Other releases go, except pip's CUDA libraries.
  for old in "$data_dir"/*; do
    case $old in
      "$dest" | "$data_dir/cuda") ;;
      *) rm -rf "$old" ;;
    esac
  done

  if ! "$dest/bin/sys1rust" --version >"$tmp/version.out" 2>&1; then
    say "Installed sys1rust $version ($platform) in $dest, but it cannot start:"
    sed 's/^/  /' "$tmp/version.out"
    missing_requirements_hint
    exit 1
  fi
  say "Installed sys1rust $version ($platform) in $dest"

  case ":${PATH:-}:" in
    *":$bin_dir:"* | *":$bin_dir/:"*)
      found=$(command -v sys1rust 2>/dev/null || true)
      if [ -n "$found" ] && [ "$found" != "$link" ]; then
        warn "note: $found comes before $link on PATH"
      fi
      ;;
    *)
      case ${SHELL:-} in
        */zsh) rc=.zshrc ;;
        */bash) rc=.bashrc ;;
        *) rc=.profile ;;
      esac
      say "Add $bin_dir to PATH, e.g.: echo 'export PATH=\"\$HOME/.local/bin:\$PATH\"' >> ~/$rc"
      ;;
  esac

  if [ "$service" = 1 ]; then
    service_apply install
  else
    service_apply update
  fi
}

uninstall() {
  os=$(uname -s)
  service_remove
  if [ -L "$link" ]; then
    case $(readlink "$link") in
      "$data_dir"/*) rm -f "$link" ;;
      *) warn "left $link alone: it does not point into $data_dir" ;;
    esac
  fi
  rm -rf "$data_dir" "$config_dir"
  say "Uninstalled sys1rust."
  # Where sys1rust (like huggingface_hub) keeps downloaded models.
  hf_home=${HF_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/huggingface}
  cache=${HF_HUB_CACHE:-${HUGGINGFACE_HUB_CACHE:-$hf_home/hub}}
  for model in "$cache"/models--convaiinnovations--laya*; do
    if [ -d "$model" ]; then
      say "Downloaded models were kept in $cache; to delete them too:"
      say "  rm -rf $cache/models--convaiinnovations--laya*"
      break
    fi
  done
}

case $action in
  install) install_release ;;
  uninstall) uninstall ;;
  print-service) render_service "$print_kind" ;;
esac

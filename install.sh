#!/bin/sh
# Installs sys1rust for the current user, without sudo:
#   ~/.local/share/sys1rust/<version>/   the release bundle (binary, libmlx, licenses)
#   ~/.local/bin/sys1rust                a link to its binary
# and, with --service, a background service: a systemd user unit on Linux, a LaunchAgent on
# macOS, both rendered by render_service below from one set of values. --service downloads
# the models the service will serve before it enables the service, so that a machine that
# cannot reach Hugging Face fails here, with advice, instead of in a restart loop.
#
# --uninstall keeps ~/.config/sys1rust/env (it may hold LAYA_API_KEY) and the caches;
# --purge, like apt-get purge, is --uninstall that also removes those. Neither deletes
# downloaded models: they live in the Hugging Face cache, which other tools (upstream laya in
# Python, huggingface_hub) share; the uninstaller prints where they are.
#
# The help text is a heredoc in usage(), not these comments, because under
# `curl ... | sh -s -- --help` there is no file to read them from.
set -eu

repo_url=https://github.com/sys1rust/sys1rust
base_url=${SYS1_BASE_URL:-$repo_url/releases}
base_url=${base_url%/}
version=${SYS1_VERSION:-}
action=install
service=0
purge=0
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

usage() {
  cat <<EOF
Installs sys1rust for the current user (no sudo) in ~/.local/share/sys1rust, linked from
~/.local/bin/sys1rust, and optionally runs it as a background service.

  curl -fsSL $repo_url/releases/latest/download/install.sh | sh
  curl -fsSL $repo_url/releases/latest/download/install.sh | sh -s -- --service
  sh install.sh [--version X] [--service] [--uninstall | --purge]

Options:
  --version X      install release X (default: the latest)
  --service        also install and (re)start the background service (\`sys1rust serve\`,
                   options in ~/.config/sys1rust/env). It first downloads the models the
                   service serves (\`sys1rust pull\`, SYS1_MODEL in that file picks one) and
                   stops with advice if it cannot. The HF_* and proxy variables exported here
                   that the download uses are copied into that file (the service reads only
                   it); HF_TOKEN is not: add it there yourself if the service needs it.
  --uninstall      remove the service, the install and the link; keep the options file
                   ~/.config/sys1rust/env (it may hold LAYA_API_KEY), the compiled-kernel
                   cache and downloaded models
  --purge          --uninstall (implied), and also remove the options file and the
                   compiled-kernel cache (~/.cache/sys1rust). Downloaded models stay even
                   then: they are in the Hugging Face cache, shared with other tools; the
                   uninstaller prints where they are and the command that deletes them.
  --print-service systemd|launchd
                   print the service file this installer would write, and exit
  -h, --help       print this help

Environment:
  SYS1_VERSION     same as --version
  SYS1_VARIANT     Linux x86-64 build: cpu or cuda13 (default: cuda13 when an NVIDIA
                   driver >= 580 is present, else cpu)
  SYS1_BASE_URL    where releases live (default $repo_url/releases):
                   release X is <base>/download/vX/<file>; the latest one's SHA256SUMS is
                   <base>/latest/download/SHA256SUMS (GitHub redirects it; a static server
                   can hold a copy there), and the version is read from the tarball it names.

Running it again installs the requested (or latest) release, removes the others and restarts
a running service; a release whose binary cannot start is not switched to (the installed one
stays). It prints little on success and exits non-zero with a reason on failure.
EOF
}

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
    --purge) action=uninstall purge=1 && shift ;;
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
# Where serve keeps compiled GPU kernels by default (MLX's in mlx/, the CUDA engine's in
# kernels/): see --kernel-cache in 'sys1rust serve --help'.
kernel_cache=${XDG_CACHE_HOME:-$HOME/.cache}/sys1rust

# --- the service: one set of values, rendered as a systemd unit or a LaunchAgent -----------

xml_escape() { printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g'; }
# A path in a unit file: systemd expands %-specifiers, so % is doubled.
systemd_path() { printf '%s' "$1" | sed -e 's/%/%%/g'; }

render_service() {
  description="sys1rust: Laya System 1 decision models over HTTP"
  program=$link # the stable link, so an update needs no new service file
  command=serve # options come from the environment file (see 'sys1rust serve --help')
  # Restarts are paced and, on systemd, limited: a server that cannot start (a model it cannot
  # download, a bad option) gives up after about a minute and a half instead of retrying
  # forever. A crash now and then stays under the limit and is restarted.
  restart_delay=10
  start_limit_burst=10
  start_limit_interval=300
  # On SIGTERM serve drains its in-flight requests for up to SYS1_SHUTDOWN_GRACE (30 s by
  # default, after SYS1_DRAIN_DELAY, 0 by default) before it exits; the service manager waits
  # this long before SIGKILL (launchd's own default is 20 s, too short for the drain). Raise it
  # with those two.
  stop_timeout=45
  case $1 in
    systemd)
      case $HOME in
        *[[:space:]\"\\]*) die "a systemd unit cannot use this HOME ($HOME): it has spaces, quotes or backslashes" ;;
      esac
      # network-online.target is a system unit and user managers have none (systemd.special(7)),
      # so Wants=/After= order the service only where the user instance was given one (a bridge
      # from the system target) and are a no-op elsewhere, which systemd-analyze verify
      # accepts. A boot without the network is covered otherwise: --service has downloaded the
      # models, and serve starts from that cache without the network; the paced, limited
      # restarts cover a model that is not in it.
      cat <<EOF
# Written by the sys1rust installer ($repo_url); running it again rewrites this file.
# Options: NAME=value lines in $env_file. Logs: journalctl --user -u sys1rust
# After $start_limit_burst failed starts in $start_limit_interval s systemd stops restarting it; start it again with
#   systemctl --user reset-failed sys1rust && systemctl --user start sys1rust
[Unit]
Description=$description
Documentation=$repo_url
Wants=network-online.target
After=network-online.target
StartLimitIntervalSec=$start_limit_interval
StartLimitBurst=$start_limit_burst

[Service]
Type=simple
EnvironmentFile=-$(systemd_path "$env_file")
ExecStart=$(systemd_path "$program") $command
Restart=on-failure
RestartSec=$restart_delay
TimeoutStopSec=$stop_timeout
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
  <key>ExitTimeOut</key>
  <integer>$stop_timeout</integer>
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

# The variables that decide where `sys1rust pull` and serve keep models and how they reach
# Hugging Face (laya-hub's HubConfig::from_env and its proxy settings). The pull below runs
# with this shell's environment under the options file, but the service gets the options file
# alone (a systemd user manager and launchd read no shell profile): record_fetch_settings
# copies the ones exported here and not set in that file into it, so that both use one cache,
# endpoint, offline mode and proxy.
fetch_settings="HF_HOME HF_HUB_CACHE HUGGINGFACE_HUB_CACHE XDG_CACHE_HOME HF_ENDPOINT HF_HUB_OFFLINE TRANSFORMERS_OFFLINE HF_TOKEN_PATH https_proxy HTTPS_PROXY http_proxy HTTP_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY"
# Secrets stay out of the file, which is created with the default umask and is not only the
# installer's: a token (and a proxy URL with credentials) is named instead of copied.
secret_settings="HF_TOKEN HUGGING_FACE_HUB_TOKEN"

# Whether the options file assigns variable $1 (even to nothing).
env_file_sets() {
  [ -f "$env_file" ] || return 1
  (
    unset "$1"
    # shellcheck disable=SC1090 # the user's options file
    . "$env_file" >/dev/null 2>&1
    eval "[ -n \"\${$1+set}\" ]"
  )
}

record_fetch_settings() {
  copied=
  for var in $fetch_settings; do
    eval "val=\${$var:-}"
    if [ -z "$val" ] || env_file_sets "$var"; then continue; fi
    case $var in
      *_proxy | *_PROXY)
        case $val in
          *@*)
            warn "$var names a proxy with credentials: not copied into $env_file (the download uses it, the service will not); set it there yourself, chmod 600, if the service must download through it"
            continue
            ;;
        esac
        ;;
    esac
    case $val in
      # Only values that sh (the pull, the LaunchAgent) and systemd's EnvironmentFile= read
      # alike when unquoted: no space, quote, backslash, ~ or $.
      *[!A-Za-z0-9_./:@%+,=-]*)
        die "$var='$val' is exported here, so the download would use it, but it has characters this installer does not copy into $env_file; set $var there yourself (quoted) and run this again"
        ;;
    esac
    if [ -z "$copied" ]; then
      printf '# Copied by the installer from the environment it ran in, where the download used them:\n' >>"$env_file"
    fi
    printf '%s=%s\n' "$var" "$val" >>"$env_file"
    copied="$copied $var"
  done
  if [ -n "$copied" ]; then
    say "Copied$copied from this shell into $env_file, so that the service uses the cache and network settings of the download"
  fi
  for var in $secret_settings; do
    eval "val=\${$var:-}"
    if [ -n "$val" ] && ! env_file_sets "$var"; then
      warn "$var is set here but not in $env_file: the download uses it, the service will not (a token is not copied into that file; add it there yourself, chmod 600, if the service must download)"
    fi
  done
}

# Runs `sys1rust pull` for what the service will serve, reading its options file the way the
# LaunchAgent does (sh, exported), from HOME as a user unit's working directory, so that the
# same SYS1_MODEL and LAYA_MODELS apply (and, after record_fetch_settings, the same HF_* and
# proxy settings). Its progress goes to stderr.
pull_models() {
  say "Downloading the models the service serves (sys1rust pull; options in $env_file)"
  if (
    cd "$HOME"
    if [ -f "$env_file" ]; then
      set -a
      # shellcheck disable=SC1090 # the user's options file
      . "$env_file"
      set +a
    fi
    set -- pull
    if [ -n "${SYS1_MODEL:-}" ]; then set -- "$@" "$SYS1_MODEL"; fi
    if [ -n "${SYS1_REVISION:-}" ]; then set -- "$@" --revision "$SYS1_REVISION"; fi
    exec "$link" "$@"
  ); then
    return 0
  fi
  {
    say "sys1rust install: error: could not download the models the service serves (the reason is above),"
    say "so the service was not installed or restarted; sys1rust itself is installed. To retry:"
    say "  run this again with --service (a download resumes where it stopped);"
    say "  behind a mirror or a proxy, set HF_ENDPOINT or HTTPS_PROXY in $env_file;"
    say "  without internet access, copy a Hugging Face cache that 'sys1rust pull' filled elsewhere"
    say "  and set HF_HUB_OFFLINE=1 in $env_file, or set SYS1_MODEL there to a checkpoint directory."
  } >&2
  exit 1
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
        else
          warn "rewrote $unit, but 'systemctl --user' cannot reach a user manager here, so a running service was not restarted and keeps the release it started with; from your login session run: systemctl --user daemon-reload && systemctl --user try-restart $unit_name"
        fi
        return 0
      fi
      systemd_user_ok || die "--service needs a systemd user manager, and 'systemctl --user' cannot reach one here (log in through a regular session such as ssh or a console, or set XDG_RUNTIME_DIR=/run/user/$(id -u))"
      write_env_file
      record_fetch_settings
      pull_models
      write_service_file systemd "$unit"
      systemctl --user daemon-reload
      systemctl --user enable --quiet "$unit_name"
      # A unit that hit its start limit refuses even a manual start until this.
      systemctl --user reset-failed "$unit_name" 2>/dev/null || true
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
      record_fetch_settings
      pull_models
      mkdir -p "$(dirname "$log_file")"
      write_service_file launchd "$plist"
      launchctl bootout "$domain/$label" >/dev/null 2>&1 || true
      # bootout can return while the old job is still stopping (serve drains for up to its
      # shutdown grace), and bootstrap then fails ("Bootstrap failed: 5: Input/output error"):
      # retry while launchctl still knows the label, for a little longer than ExitTimeOut.
      tries=0
      until launchctl bootstrap "$domain" "$plist" 2>"$tmp/bootstrap.err"; do
        tries=$((tries + 1))
        if [ "$tries" -ge 60 ] || { [ "$tries" -ge 2 ] && ! launchctl print "$domain/$label" >/dev/null 2>&1; }; then
          cat "$tmp/bootstrap.err" >&2
          die "launchctl bootstrap $domain $plist failed $tries times (above), so the service is not running; once 'launchctl print $domain/$label' finds nothing, run that bootstrap command yourself"
        fi
        sleep 1
      done
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

# The major version in an NVIDIA driver's version text on stdin: /sys/module/nvidia/version
# ("580.65.06") or the first line of /proc/driver/nvidia/version, which reads
#   NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.154.05  Thu Dec 28 ...       (proprietary)
#   NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release ...   (open)
# so the version is the line's first field that is a dotted number (not x86_64 or a time).
driver_major_of() {
  awk 'NR == 1 || /^NVRM version:/ {
    for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+[.][0-9]+([.][0-9]+)*$/) { sub(/[.].*/, "", $i); print $i; exit }
  }'
}

# The major version of the NVIDIA driver, or nothing when there is none (0: one we cannot read).
nvidia_driver_major() {
  v='' seen=''
  for f in /sys/module/nvidia/version /proc/driver/nvidia/version; do
    if [ -z "$v" ] && [ -r "$f" ]; then
      seen=1
      v=$(driver_major_of <"$f" 2>/dev/null || true)
    fi
  done
  if [ -z "$v" ] && command -v nvidia-smi >/dev/null 2>&1; then
    seen=1
    v=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 | cut -d. -f1)
  fi
  case $seen$v in
    '') ;; # no driver
    *[!0-9]* | 1) v=0 ;; # a driver we cannot read: let the CUDA build say what it needs
  esac
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
    Linux-aarch64 | Linux-arm64)
      case ${SYS1_VARIANT:-cpu} in
        cpu) ;;
        *) die "SYS1_VARIANT must be empty or cpu on Linux on Arm, not '$SYS1_VARIANT'" ;;
      esac
      platform=linux-aarch64-cpu
      ;;
    Darwin-arm64)
      case ${SYS1_VARIANT:-metal} in
        metal) ;;
        *) die "SYS1_VARIANT must be empty or metal on macOS, not '$SYS1_VARIANT'" ;;
      esac
      platform=macos-arm64
      ;;
    *)
      die "there is no sys1rust release for $os $arch; releases exist for Linux x86-64 (CPU, or NVIDIA GPUs with CUDA 13), Linux aarch64 (CPU) and macOS on Apple silicon. To build from source, see $repo_url#build-from-source"
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
    linux-x86_64-cpu | linux-aarch64-cpu)
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
    # A release's SHA256SUMS lists its own tarballs only; one listing several versions for this
    # platform (an older dist/ hashed along) cannot say which is the latest.
    versions=$(sed -n "s/^[0-9a-fA-F]\{64\}[ *]*sys1rust-\(.*\)-$platform\.tar\.gz\$/\1/p" "$tmp/SHA256SUMS" | sort -u)
    [ -n "$versions" ] || die "the latest release ($sums_url) has no $platform build"
    if [ "$(printf '%s\n' "$versions" | awk 'END { print NR }')" != 1 ]; then
      die "$sums_url lists more than one version for $platform ($(printf '%s\n' "$versions" | tr '\n' ' ' | sed 's/ $//')), so it cannot tell which is the latest: name one with --version X (the releases: $repo_url/releases)"
    fi
    version=$versions
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

  # The release being replaced, read before it goes: its VERSION file, else its directory name.
  previous=
  if [ -L "$link" ]; then
    case $(readlink "$link") in
      "$data_dir"/*/bin/sys1rust)
        old_dir=$(readlink "$link")
        old_dir=${old_dir%/bin/sys1rust}
        if [ -f "$old_dir/VERSION" ]; then previous=$(head -n 1 "$old_dir/VERSION"); fi
        if [ -z "$previous" ] && [ -d "$old_dir" ]; then previous=${old_dir##*/}; fi
        ;;
    esac
  fi

  if [ -z "$previous" ]; then
    outcome="Installed sys1rust $version"
  elif [ "$previous" = "$version" ]; then
    outcome="Reinstalled sys1rust $version"
  else
    outcome="Updated sys1rust from $previous to $version"
  fi

  # Unpack beside the final place and move it there (a reinstall keeps the old copy in
  # .previous), check that it starts, and only then switch the link and delete other releases:
  # a release that cannot start leaves the one installed before it, and a running service,
  # untouched.
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
  rm -rf "$staging"

  if ! "$dest/bin/sys1rust" --version >"$tmp/version.out" 2>&1; then
    if [ -n "$previous" ]; then
      # Back to what was there: the link still names it, and nothing else was deleted.
      rm -rf "$dest"
      if [ -e "$data_dir/.previous" ]; then mv "$data_dir/.previous" "$dest"; fi
      if [ "$previous" = "$version" ]; then
        say "The new copy of sys1rust $version ($platform) cannot start, so the one installed before stays in $dest:"
      else
        say "sys1rust $version ($platform) cannot start, so it was not installed; sys1rust $previous stays installed (and a running service on it):"
      fi
    else
      # Nothing to go back to: the install stays, so that it runs once the libraries it lacks
      # are added (below).
      rm -rf "$data_dir/.previous"
      mkdir -p "$bin_dir"
      ln -s "$dest/bin/sys1rust" "$link.new.$$"
      mv -f "$link.new.$$" "$link"
      say "$outcome ($platform) in $dest, but it cannot start:"
    fi
    sed 's/^/  /' "$tmp/version.out"
    missing_requirements_hint
    exit 1
  fi
  rm -rf "$data_dir/.previous"

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
  say "$outcome ($platform) in $dest"

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

# Prints the value of $1 as the service sees it: its options file over the environment.
service_setting() {
  (
    if [ -f "$env_file" ]; then
      set -a
      # shellcheck disable=SC1090 # the user's options file
      . "$env_file" >/dev/null 2>&1
    fi
    eval "printf '%s' \"\${$1:-}\""
  ) || true
}

uninstall() {
  os=$(uname -s)
  # Read before --purge deletes the options file that may set them.
  hf_home=$(service_setting HF_HOME)
  hf_home=${hf_home:-${XDG_CACHE_HOME:-$HOME/.cache}/huggingface}
  models=$(service_setting HF_HUB_CACHE)
  [ -n "$models" ] || models=$(service_setting HUGGINGFACE_HUB_CACHE)
  models=${models:-$hf_home/hub}
  own_kernel_cache=$(service_setting SYS1_KERNEL_CACHE)

  service_remove
  if [ -L "$link" ]; then
    case $(readlink "$link") in
      "$data_dir"/*) rm -f "$link" ;;
      *) warn "left $link alone: it does not point into $data_dir" ;;
    esac
  fi
  rm -rf "$data_dir"
  if [ "$purge" = 1 ]; then
    say "Uninstalled sys1rust."
    if [ -f "$env_file" ]; then say "Deleted the service's options file $env_file."; fi
    if [ -d "$kernel_cache" ]; then say "Deleted the compiled-kernel cache $kernel_cache."; fi
    rm -rf "$config_dir" "$kernel_cache"
    if [ -n "$own_kernel_cache" ]; then
      say "The options file set SYS1_KERNEL_CACHE=$own_kernel_cache: left alone; delete it yourself if nothing else uses it."
    fi
  else
    # The options file stays: it may hold LAYA_API_KEY, and a later install reuses it.
    rmdir "$config_dir" 2>/dev/null || true
    say "Uninstalled sys1rust."
    if [ -f "$env_file" ]; then
      say "Kept the service's options file $env_file (it may hold LAYA_API_KEY); --purge deletes it."
    fi
    if [ -d "$kernel_cache" ]; then
      say "Kept the compiled-kernel cache $kernel_cache; --purge deletes it."
    fi
  fi
  # sys1rust keeps models where huggingface_hub does, so other tools may use them too.
  for model in "$models"/models--convaiinnovations--laya*; do
    if [ -d "$model" ]; then
      say "Downloaded models were kept in $models; to delete them too:"
      say "  rm -rf $models/models--convaiinnovations--laya*"
      break
    fi
  done
}

case $action in
  install) install_release ;;
  uninstall) uninstall ;;
  print-service) render_service "$print_kind" ;;
esac

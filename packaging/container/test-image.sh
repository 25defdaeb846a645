#!/usr/bin/env bash
# Builds the CPU container image from an already built sys1rust and tests it without a
# container runtime (`podman run` needs rlimits and namespaces that nested build machines
# refuse), the way a runtime would run it:
#   1. packaging/build-bundle.sh linux-x86_64-cpu --binary FILE (nothing is recompiled);
#   2. packaging/container/build-image.sh on that bundle, with --verify and --archive, into a
#      container storage of its own under --out (so the test leaves nothing in the user's
#      images); records the image's size unpacked (podman's figure and the files in it), as a
#      docker-archive and as that archive gzip-compressed (about what a registry transfers);
#   3. mounts the image (buildah from + buildah mount) in a private mount namespace and a
#      network namespace of its own, and lays it out as the Deployment runs it: the root
#      filesystem read-only, a fresh /data volume owned by the image's user holding the
#      fixture checkpoint crates/laya-fixtures/data/checkpoints/tiny, a tmpfs /tmp, a minimal
#      /dev, a private /proc; every command runs with the image's Env, User and WorkingDir
#      (unshare --root --setuid --setgid), nothing from this host's environment;
#   4. inside: `sys1rust --version` (must name the version); the image's ENTRYPOINT + CMD
#      (serve --host 0.0.0.0) with SYS1_MODEL=/data/models/tiny and HF_HUB_OFFLINE=1, as a
#      Deployment would set them; the image's HEALTHCHECK command (must pass, and fail
#      against a closed port);
#   5. from outside the image (curl and python3 of this host, in the same network namespace):
#      /ready until 200, the README's example request (200, JSON with the keys and order
#      upstream's recorded answers have, routing.repo naming the fixture), every 200 request
#      of references/tiny/short.jsonl against upstream's recorded body (numbers to within one
#      unit of the 4th decimal, everything else exact), /health, /metrics (the gauge
#      deploy/kubernetes/examples/hpa-queue-depth.yaml scales on);
#   6. SIGTERM: serve must exit 0 within its shutdown grace.
# Containers, mounts and the storage are removed at exit (--keep keeps the storage).
#
# It prints `skipped: <reason>` and exits 0 only where buildah cannot run here (not installed
# and not installable, no mount or network namespaces, no storage driver that mounts); every
# other problem fails it. Without buildah it installs Debian's buildah and podman with apt-get
# when it can (root or password-less sudo; SYS1_IMAGE_TEST_INSTALL=0 turns that off).
#
# Usage: packaging/container/test-image.sh [--binary FILE] [--out DIR] [--keep]
#   --binary FILE   the sys1rust to package (default target/release/sys1rust)
#   --out DIR       the bundle, the archive, logs and report.txt (default target/image-test)
#   --keep          keep the image's storage (CONTAINERS_STORAGE_CONF=DIR/storage.conf podman images)
# Environment: STORAGE_DRIVER (default: overlay, then vfs where overlay cannot mount).
set -euo pipefail

say() { printf 'test-image: %s\n' "$*" >&2; }
die() {
  say "FAIL: $*"
  exit 1
}
skip() {
  echo "skipped: $*"
  exit 0
}

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
self=$here/$(basename "$0")
fixture=$repo/crates/laya-fixtures/data/checkpoints/tiny
references=$repo/crates/laya-fixtures/data/references/tiny

# Runs its arguments where buildah's mounts are visible: as root directly, otherwise in
# buildah's user namespace.
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else buildah unshare "$@"; fi
}

# Installs buildah and podman (and patchelf, which build-bundle.sh --binary needs) when they
# are missing and apt-get can.
install_tools() {
  local missing=() sudo=()
  for p in buildah podman patchelf; do command -v "$p" >/dev/null || missing+=("$p"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  [ "${SYS1_IMAGE_TEST_INSTALL:-1}" = 1 ] && command -v apt-get >/dev/null || return 0
  if [ "$(id -u)" != 0 ]; then
    sudo -n true 2>/dev/null || return 0
    sudo=(sudo -n)
  fi
  say "installing ${missing[*]} with apt-get (log: $out/apt.log)"
  local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}")
  if ! "${apt[@]}" >"$out/apt.log" 2>&1; then
    # Stale package lists are the usual reason.
    "${sudo[@]}" apt-get update -q >>"$out/apt.log" 2>&1 || true
    "${apt[@]}" >>"$out/apt.log" 2>&1 || say "apt-get could not install ${missing[*]}: $(tail -n 1 "$out/apt.log")"
  fi
}

# A storage of the test's own, with the given driver; succeeds when buildah can create and
# mount a container in it. The reason it cannot is left in $out/probe.log.
try_storage() {
  local driver=$1
  cat >"$out/storage.conf" <<EOF
[storage]
driver = "$driver"
graphroot = "$out/storage/$driver/graph"
runroot = "$out/storage/$driver/run"
EOF
  export CONTAINERS_STORAGE_CONF=$out/storage.conf
  # shellcheck disable=SC2016 # expanded by the inner bash
  as_root bash -c 'set -e
    c=$(buildah from --quiet scratch)
    m=$(buildah mount "$c")
    test -d "$m"
    buildah umount "$c" >/dev/null
    buildah rm "$c" >/dev/null' >"$out/probe.log" 2>&1
}

main() {
  binary=$repo/target/release/sys1rust out=$repo/target/image-test keep=0
  while [ $# -gt 0 ]; do
    case $1 in
      --binary) binary=${2:?--binary needs a file} && shift 2 ;;
      --out) out=${2:?--out needs a directory} && shift 2 ;;
      --keep) keep=1 && shift ;;
      -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0" && exit 0 ;;
      *) die "unknown argument $1" ;;
    esac
  done
  [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || skip "the CPU image is built on Linux x86-64, this is $(uname -s)-$(uname -m)"
  [ -x "$binary" ] || die "no executable $binary (build it: cargo build --release -p sys1rust)"
  binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")
  mkdir -p "$out"
  out=$(cd "$out" && pwd)

  install_tools
  command -v buildah >/dev/null || skip "buildah is not installed and could not be installed here (Debian: apt-get install buildah podman)"
  for tool in patchelf curl python3 gzip ip unshare; do
    command -v "$tool" >/dev/null || die "$tool is needed"
  done

  # A storage of our own: nothing is left among the user's images, and a driver that cannot
  # mount here (overlay inside another container) is replaced by vfs.
  if [ -d "$out/storage" ]; then as_root rm -rf "$out/storage"; fi
  cleanup_storage() {
    if [ "$keep" = 1 ]; then
      say "kept the storage: CONTAINERS_STORAGE_CONF=$out/storage.conf podman images"
      return
    fi
    as_root buildah rm --all >/dev/null 2>&1 || true
    as_root rm -rf "$out/storage" 2>/dev/null || rm -rf "$out/storage" 2>/dev/null || true
  }
  trap cleanup_storage EXIT
  local drivers=(overlay vfs) driver='' reasons=''
  if [ -n "${STORAGE_DRIVER:-}" ]; then drivers=("$STORAGE_DRIVER"); fi
  for d in "${drivers[@]}"; do
    if try_storage "$d"; then
      driver=$d
      break
    fi
    reasons="$reasons $d: $(grep -v '^$' "$out/probe.log" | tail -n 1);"
    say "storage driver $d cannot mount here"
  done
  [ -n "$driver" ] || skip "buildah cannot create and mount a container here:$reasons"
  if ! as_root unshare --mount --net --propagation private true 2>"$out/probe.log"; then
    skip "cannot create the mount and network namespaces the mounted image runs in: $(tail -n 1 "$out/probe.log")"
  fi
  say "buildah $(buildah --version | awk '{print $3}'), storage driver $driver, in ${out#"$repo"/}/storage"

  version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$repo/Cargo.toml")
  [ -n "$version" ] || die "no version in Cargo.toml"

  # 1. The bundle, from the given binary.
  rm -rf "$out/dist"
  tarball=$("$repo/packaging/build-bundle.sh" linux-x86_64-cpu --binary "$binary" --out "$out/dist")
  say "bundle $(basename "$tarball"): $(stat -c %s "$tarball") bytes"

  # 2. The image.
  archive=$out/sys1rust-$version-cpu.docker.tar
  line=$("$here/build-image.sh" "$tarball" --verify --archive "$archive")
  read -r tag size <<<"$line"
  case $size in '' | *[!0-9]*) die "build-image.sh printed '$line', not '<image> <bytes>'" ;; esac
  archive_bytes=$(stat -c %s "$archive")
  gzip_bytes=$(gzip -6 -c "$archive" | wc -c)

  # 3-6. The mounted image, in namespaces of its own.
  {
    echo "image=$tag"
    echo "storage_driver=$driver"
    echo "image_bytes=$size"
    echo "archive_bytes=$archive_bytes"
    echo "archive_gzip_bytes=$gzip_bytes"
    echo "bundle_bytes=$(stat -c %s "$tarball")"
  } >"$out/report.txt"
  as_root unshare --mount --net --propagation private "$self" __mounted "$tag" "$out" "$version"

  mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
  say "image $tag: $size bytes unpacked ($(mib "$size")), docker-archive $archive_bytes bytes ($(mib "$archive_bytes")), gzip-compressed $gzip_bytes bytes ($(mib "$gzip_bytes"))"
  say "report: ${out#"$repo"/}/report.txt"
  echo "passed: $tag $(mib "$size") unpacked, $(mib "$gzip_bytes") compressed"
}

# Steps 3-6, as (namespace) root in a private mount namespace and a fresh network namespace.
mounted() {
  local tag=$1 out=$2 version=$3
  # Globals: the EXIT trap reads them after this function has returned.
  ctr='' mnt='' server='' serve_pid=''
  cleanup() {
    if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
      # serve first: it is PID 1 of its namespace, so everything in there goes with it. (A
      # parent-death signal cannot do this: the kernel clears it when --setuid changes the
      # credentials.)
      local p
      for p in $(cat "/proc/$server/task/$server/children" 2>/dev/null) $serve_pid; do
        kill -KILL "$p" 2>/dev/null || true
      done
      kill -KILL "$server" 2>/dev/null || true
      wait "$server" 2>/dev/null || true
    fi
    if [ -n "$ctr" ]; then
      buildah umount "$ctr" >/dev/null 2>&1 || true
      buildah rm "$ctr" >/dev/null 2>&1 || true
    fi
  }
  trap cleanup EXIT
  ip link set lo up

  ctr=$(buildah from --quiet --pull=never "$tag")
  mnt=$(buildah mount "$ctr")
  [ -x "$mnt/opt/sys1rust/bin/sys1rust" ] || die "the image has no /opt/sys1rust/bin/sys1rust"

  # The image's configuration, as a runtime reads it.
  buildah inspect --type image "$tag" >"$out/image-inspect.json"
  local conf
  conf=$(python3 - "$out/image-inspect.json" <<'EOF'
import json, shlex, sys

c = (json.load(open(sys.argv[1])).get("Docker") or {}).get("config") or {}
def arr(name, v):
    print(f"{name}=(" + " ".join(shlex.quote(x) for x in (v or [])) + ")")
arr("img_env", c.get("Env"))
arr("img_entry", c.get("Entrypoint"))
arr("img_cmd", c.get("Cmd"))
arr("img_health", (c.get("Healthcheck") or {}).get("Test"))
arr("img_ports", [p.split("/")[0] for p in (c.get("ExposedPorts") or {})])
print("img_user=" + shlex.quote(c.get("User") or ""))
print("img_workdir=" + shlex.quote(c.get("WorkingDir") or "/"))
print("img_volumes=(" + " ".join(shlex.quote(v) for v in (c.get("Volumes") or {})) + ")")
EOF
  )
  local img_env=() img_entry=() img_cmd=() img_health=() img_ports=() img_volumes=() img_user='' img_workdir=''
  eval "$conf"
  [[ $img_user =~ ^([1-9][0-9]*):([0-9]+)$ ]] || die "the image's User '$img_user' is not a numeric uid:gid"
  local uid=${BASH_REMATCH[1]} gid=${BASH_REMATCH[2]}
  [ ${#img_entry[@]} -gt 0 ] || die "the image has no Entrypoint"
  [ "${img_health[0]:-}" = CMD ] || die "the image's Healthcheck is '${img_health[*]:-none}', not an exec-form CMD (the image has no shell)"
  [ "${img_ports[*]}" = 8000 ] || die "the image exposes '${img_ports[*]}', not 8000"
  [ "${img_volumes[*]}" = /data ] || die "the image's volumes are '${img_volumes[*]}', not /data"
  [ "$(stat -c %u:%g "$mnt/data")" = "$uid:$gid" ] || die "/data in the image is owned by $(stat -c %u:%g "$mnt/data"), not the image's user (a fresh volume copies that)"
  echo "rootfs_bytes=$(du -sb "$mnt" | cut -f1)" >>"$out/report.txt"
  echo "user=$img_user" >>"$out/report.txt"

  # The layout a runtime gives it (the Deployment's, see deploy/kubernetes/base).
  mount --bind "$mnt" "$mnt"
  mount -t tmpfs -o mode=1777,size=256m tmpfs "$mnt/tmp"
  mount -t tmpfs -o "mode=0755,uid=$uid,gid=$gid,size=1g" tmpfs "$mnt/data"
  mkdir -p "$mnt/data/models"
  cp -R "$fixture" "$mnt/data/models/tiny"
  mount -t tmpfs -o mode=0755,size=64k tmpfs "$mnt/dev"
  for n in null zero full random urandom tty; do
    : >"$mnt/dev/$n"
    mount --bind "/dev/$n" "$mnt/dev/$n"
  done
  mkdir "$mnt/dev/shm"
  mount -t tmpfs -o mode=1777,size=64m tmpfs "$mnt/dev/shm"
  mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$mnt/sys" 2>/dev/null || mount --rbind /sys "$mnt/sys"
  mount -o remount,bind,ro "$mnt"
  if : 2>/dev/null >"$mnt/written"; then die "the image's root filesystem is still writable"; fi

  # A command inside the image: as the image's user, with the image's environment and nothing
  # of this host's, in its working directory, as PID 1 of a pid namespace with its own /proc.
  local enter=("$(command -v unshare)" --pid --fork --mount-proc
    --root="$mnt" --wd="$img_workdir" --setgid="$gid" --setuid="$uid" --)
  in_image() { env -i "${img_env[@]}" "${enter[@]}" "$@"; }

  # --version.
  local v
  v=$(in_image "${img_entry[@]}" --version) || die "sys1rust --version failed inside the image"
  case $v in *"$version"*) ;; *) die "sys1rust --version inside the image says '$v', not version $version" ;; esac
  say "inside the image: $v"
  echo "version=$(printf '%s' "$v" | tr '\n' ' ')" >>"$out/report.txt"

  # serve, as the image starts it, with what a Deployment would add.
  # (A simple command, so that $! is unshare's pid and serve is its only child.)
  env -i "${img_env[@]}" SYS1_MODEL=/data/models/tiny HF_HUB_OFFLINE=1 "${enter[@]}" \
    "${img_entry[@]}" "${img_cmd[@]}" >"$out/serve.stdout" 2>"$out/serve.stderr" &
  server=$!
  local base=http://127.0.0.1:${img_ports[0]} code first='' t0=$SECONDS
  until code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$base/ready") && [ "$code" = 200 ]; do
    first=${first:-$code}
    kill -0 "$server" 2>/dev/null || die "serve exited before it was ready: $(tail -n 5 "$out/serve.stderr")"
    [ $((SECONDS - t0)) -lt 120 ] || die "/ready not 200 within 120 s (last: $code): $(tail -n 5 "$out/serve.stderr")"
    sleep 0.2
  done
  say "/ready 200 after $((SECONDS - t0)) s (first answer: ${first:-200}); serve: $(head -n 1 "$out/serve.stdout")"
  serve_pid=$(cat "/proc/$server/task/$server/children" 2>/dev/null || ps -o pid= --ppid "$server")
  serve_pid=${serve_pid// /}
  [ -n "$serve_pid" ] || die "cannot find the serve process under $server"
  [ "$(awk '/^Uid:/ { print $2 }' "/proc/$serve_pid/status")" = "$uid" ] || die "serve does not run as uid $uid"

  # The image's HEALTHCHECK, as the runtime runs it; and the same probe against a closed port.
  in_image "${img_health[@]:1}" >"$out/health.log" 2>&1 || die "the image's HEALTHCHECK (${img_health[*]:1}) failed: $(cat "$out/health.log")"
  if in_image "${img_entry[@]}" health --url http://127.0.0.1:9/health >>"$out/health.log" 2>&1; then
    die "sys1rust health passed against a closed port"
  fi
  say "HEALTHCHECK passes (${img_health[*]:1}), and fails against a closed port"

  # The README's example request, from outside the image.
  python3 - "$repo/README.md" "$out/readme-request.json" <<'EOF'
import json, re, sys

m = re.search(r"curl -s http://127\.0\.0\.1:8000/v1/systemone [^\n]*-d '(.*?)'", open(sys.argv[1]).read(), re.S)
if not m:
    sys.exit("no `curl -s http://127.0.0.1:8000/v1/systemone ... -d '...'` example in README.md")
json.dump(json.loads(m.group(1)), open(sys.argv[2], "w"))
EOF
  code=$(curl -sS -o "$out/readme-response.json" -D "$out/readme-response.headers" -w '%{http_code}' \
    -H 'content-type: application/json' --data-binary @"$out/readme-request.json" "$base/v1/systemone") ||
    die "the README's request failed"
  [ "$code" = 200 ] || die "the README's request answered $code: $(cat "$out/readme-response.json")"
  grep -qi '^content-type: application/json' "$out/readme-response.headers" || die "the README's answer is not application/json"
  # Against upstream: the key layout of its recorded answers, then its recorded bodies.
  python3 - "$out/readme-request.json" "$out/readme-response.json" "$references" "$base" >"$out/answers.log" <<'EOF' ||
import json, sys, urllib.error, urllib.request

request, response, refs, base = sys.argv[1:]
req = json.load(open(request))
body = json.load(open(response))
def records(name):
    return [json.loads(line) for line in open(f"{refs}/{name}.jsonl")]
def answered(rs):
    return [r for r in rs if r["status"] == 200 and r["request"]["path"] == "/v1/systemone"]
ok = [json.loads(r["body"]) for r in answered(records("smoke") + records("short"))]

def fail(msg):
    sys.exit(f"FAIL {msg}")

if list(body) != list(ok[0]):
    fail(f"top-level keys {list(body)}, upstream's {list(ok[0])}")
for part in ("usage", "routing"):
    if list(body[part]) != list(ok[0][part]):
        fail(f"{part} keys {list(body[part])}, upstream's {list(ok[0][part])}")
if body["routing"]["repo"] != "tiny":
    fail(f"routing.repo is {body['routing']['repo']!r}, not the fixture 'tiny'")
shapes = {}
for b in ok:
    for a in b["answers"].values():
        shapes.setdefault(a["type"], list(a))
if list(body["answers"]) != list(req["questions"]):
    fail(f"answers {list(body['answers'])} for questions {list(req['questions'])}")
for name, q in req["questions"].items():
    a = body["answers"][name]
    if a.get("type") != q["type"] or list(a) != shapes[q["type"]]:
        fail(f"answer {name}: keys {list(a)}, upstream's {q['type']} answers have {shapes[q['type']]}")
    if "act_probability" not in a["action"]:
        fail(f"answer {name}: no action.act_probability")
    if q["type"] == "choice" and (list(a["probabilities"]) != list(q["criteria"]) or a["choice"] not in q["criteria"]):
        fail(f"answer {name}: probabilities {list(a['probabilities'])} for criteria {list(q['criteria'])}")
    if "probabilities" in a and abs(sum(a["probabilities"].values()) - 1) > 1e-3:
        fail(f"answer {name}: probabilities sum to {sum(a['probabilities'].values())}")
print(f"README request: 200, keys as upstream's, routing {body['routing']['model']} on {body['routing']['repo']}")

# upstream's recorded answers (short.jsonl: one-question requests), bodies compared as JSON:
# every key, string and order exact, numbers within one unit of the 4th decimal (f32 summation
# order, see crates/laya-mlx/tests/answers.rs; the replay test holds the stricter rule).
def same(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= 1.0001e-4
    return a == b

exact = close = 0
replay = answered(records("short"))
if not replay:
    fail("short.jsonl holds no recorded 200 answers")
for r in replay:
    data = json.dumps(r["request"]["body"]).encode()
    hreq = urllib.request.Request(base + "/v1/systemone", data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(hreq, timeout=60) as resp:
            status, text = resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    if status != 200:
        fail(f"{r['id']}: {status} {text}")
    if text == r["body"]:
        exact += 1
    elif same(json.loads(text), json.loads(r["body"])):
        close += 1
    else:
        fail(f"{r['id']}: body differs from upstream's\n  ours:     {text}\n  upstream: {r['body']}")
print(f"short.jsonl: {exact + close} recorded requests, {exact} byte-identical to upstream, {close} within 1e-4")
open(response + ".count", "w").write(f"{1 + exact + close}\n")
EOF
    die "$(tail -n 3 "$out/answers.log")"
  sed 's/^/test-image: /' "$out/answers.log" >&2
  sed 's/^/answers: /' "$out/answers.log" >>"$out/report.txt"

  # /health (upstream's contract) and /metrics (the gauge the queue-depth HPA example uses).
  code=$(curl -s -o "$out/health.json" -w '%{http_code}' "$base/health")
  if [ "$code" != 200 ] || ! grep -q '"status":"ok"' "$out/health.json"; then
    die "/health answered $code: $(cat "$out/health.json")"
  fi
  code=$(curl -s -o "$out/metrics.txt" -w '%{http_code}' "$base/metrics")
  [ "$code" = 200 ] || die "/metrics answered $code"
  grep -q '^sys1_queue_depth [0-9]' "$out/metrics.txt" || die "/metrics has no sys1_queue_depth gauge"
  local answered counted
  answered=$(cat "$out/readme-response.json.count")
  counted=$(sed -n 's/^sys1_requests_total{route="single",status="200"} \([0-9]*\)$/\1/p' "$out/metrics.txt")
  [ "$counted" = "$answered" ] || die "/metrics counts '${counted}' answered /v1/systemone requests, the test sent $answered"
  say "/health 200; /metrics has sys1_queue_depth and counted the $answered answers"

  # SIGTERM: drain and exit 0 within the grace.
  local rc=0 t1=$SECONDS
  kill -TERM "$serve_pid"
  wait "$server" || rc=$?
  server=''
  [ "$rc" = 0 ] || die "serve exited $rc on SIGTERM: $(tail -n 5 "$out/serve.stderr")"
  [ $((SECONDS - t1)) -le 30 ] || die "serve took $((SECONDS - t1)) s to stop"
  local wrote
  wrote=$(find "$mnt/data" -path "$mnt/data/models" -prune -o -print | sed "s|^$mnt||" | tr '\n' ' ')
  say "SIGTERM: serve exited 0 after $((SECONDS - t1)) s; the volume holds: $wrote"
  echo "checks=version healthcheck readme-request short-replay health metrics sigterm read-only-root" >>"$out/report.txt"
}

# The script runs itself again inside the namespaces for steps 3-6 (see main).
if [ "${1:-}" = __mounted ]; then
  shift
  mounted "$@"
else
  main "$@"
fi

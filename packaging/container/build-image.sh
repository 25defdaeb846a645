#!/usr/bin/env bash
# Builds the sys1rust container image from a release bundle (packaging/build-bundle.sh),
# with no distribution base image: the image is `FROM scratch` plus the bundle plus exactly
# the system libraries it links, so no registry has to be reachable and nothing is shipped
# that the binary never loads.
#
# Usage: packaging/container/build-image.sh BUNDLE.tar.gz [options]
#   BUNDLE.tar.gz         dist/sys1rust-<version>-linux-x86_64-{cpu,cuda13}.tar.gz; the flavor
#                         (and so the Containerfile) comes from its name
#   --tag NAME            the image name (default: sys1rust:<version>-<flavor>)
#   --nvidia-libs DIR     cuda13: a `pip install --target` directory holding nvidia/ (the CUDA
#                         13 libraries); without it they are pip-installed into a cache
#                         directory (SYS1_IMAGE_CACHE, default ~/.cache/sys1rust/image)
#   --archive FILE        also write the image as a docker-archive (for `kind load
#                         image-archive`, `k3s ctr images import`, `docker load`)
#   --verify              run `sys1rust --version` inside the built image's root filesystem
#                         (buildah mount + chroot; under `buildah unshare` when not root)
#   --keep-context DIR    assemble the build context in DIR and keep it (default: a temporary
#                         directory, removed at exit)
# Environment: BUILDAH (default buildah); STORAGE_DRIVER (read by buildah itself; vfs where
# overlay mounts are not allowed, e.g. inside another container).
#
# The system libraries are the build host's, found with ldd over every ELF file in the bundle:
# build on the oldest distribution the image should match (Debian bookworm in CI), which for
# the CPU flavor needs libopenblas0-pthread installed. Progress goes to stderr; stdout gets one
# line, `<image> <size in bytes>`.
set -euo pipefail

say() { printf 'build-image: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
tarball='' tag='' nvidia_libs='' archive='' verify=0 keep=''
while [ $# -gt 0 ]; do
  case $1 in
    --tag) tag=${2:?--tag needs a name} && shift 2 ;;
    --nvidia-libs) nvidia_libs=${2:?--nvidia-libs needs a directory} && shift 2 ;;
    --archive) archive=${2:?--archive needs a file} && shift 2 ;;
    --verify) verify=1 && shift ;;
    --keep-context) keep=${2:?--keep-context needs a directory} && shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0" && exit 0 ;;
    -*) die "unknown option $1" ;;
    *)
      [ -z "$tarball" ] || die "one bundle at a time"
      tarball=$1 && shift
      ;;
  esac
done
[ -n "$tarball" ] || die "usage: packaging/container/build-image.sh BUNDLE.tar.gz [--tag NAME] [--verify]"
[ -f "$tarball" ] || die "no bundle $tarball"
tarball=$(cd "$(dirname "$tarball")" && pwd)/$(basename "$tarball")

name=$(basename "$tarball" .tar.gz)
case $name in
  sys1rust-*-linux-x86_64-cpu) flavor=cpu ;;
  sys1rust-*-linux-x86_64-cuda13) flavor=cuda13 ;;
  *) die "$name is not a Linux x86-64 bundle (sys1rust-<version>-linux-x86_64-{cpu,cuda13}.tar.gz)" ;;
esac
[ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || die "the system libraries are taken from this host, which must be Linux x86-64"
version=${name#sys1rust-}
version=${version%-linux-x86_64-"$flavor"}
tag=${tag:-sys1rust:$version-$flavor}
buildah=${BUILDAH:-buildah}
command -v "$buildah" >/dev/null || die "$buildah is needed (Debian: apt-get install buildah)"
for tool in ldd readelf; do command -v $tool >/dev/null || die "$tool is needed"; done
# ldconfig lives in /sbin, which is not on every user's PATH; grep reads all of its output
# (grep -q would stop early, and pipefail would count ldconfig's SIGPIPE as a failure).
ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
if [ "$flavor" = cpu ] && ! "$ldconfig" -p 2>/dev/null | grep 'libopenblas\.so\.0 ' >/dev/null; then
  die "this host has no libopenblas.so.0, which the CPU binary links (Debian: apt-get install libopenblas0-pthread)"
fi

if [ -n "$keep" ]; then
  mkdir -p "$keep"
  ctx=$(cd "$keep" && pwd)
  rm -rf "${ctx:?}"/{bundle.tar.gz,rootfs,data,nvidia,unpacked}
else
  ctx=$(mktemp -d "${TMPDIR:-/tmp}/sys1rust-image.XXXXXX")
  trap 'rm -rf "$ctx"' EXIT
fi

# 1. The bundle: the tarball goes into the context as it is (the Containerfile unpacks it in
# a stage of its own); a copy is unpacked here only to find what it links.
cp "$tarball" "$ctx/bundle.tar.gz"
mkdir -p "$ctx/unpacked"
tar -C "$ctx/unpacked" -xzf "$tarball"
bundle=$ctx/unpacked/$name
[ -x "$bundle/bin/sys1rust" ] || die "$tarball holds no $name/bin/sys1rust"
bundle_version=$(cat "$bundle/VERSION" 2>/dev/null || true)
[ "$bundle_version" = "$version" ] || die "the bundle's VERSION ($bundle_version) is not its name's ($version)"

# 2. cuda13: the CUDA libraries the bundle leaves to the system. Same set as the bundle
# README's pip line (packaging/build-bundle.sh); libmlx looks for them in lib/nvidia.
mkdir -p "$ctx/nvidia"
libpath=
if [ "$flavor" = cuda13 ]; then
  if [ -z "$nvidia_libs" ]; then
    nvidia_libs=${SYS1_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sys1rust/image}/cuda13
    if [ ! -d "$nvidia_libs/nvidia" ]; then
      say "installing the CUDA 13 libraries with pip into $nvidia_libs (about 3 GB)"
      python3 -m pip install --quiet --no-compile --target "$nvidia_libs" \
        'nvidia-cudnn-cu13==9.*' nvidia-nccl-cu13 'nvidia-cublas==13.*' 'nvidia-cufft==12.*' \
        'nvidia-cuda-nvrtc==13.*' 'nvidia-cuda-runtime==13.*' >&2
    fi
  fi
  [ -d "$nvidia_libs/nvidia" ] || die "$nvidia_libs has no nvidia/ directory"
  cp -a "$nvidia_libs/nvidia/." "$ctx/nvidia/"
  # pip's metadata and Python shims are not needed at run time.
  find "$ctx/nvidia" \( -name '__pycache__' -o -name '*.py' \) -prune -exec rm -rf {} +
  mkdir -p "$bundle/lib/nvidia"
  cp -a "$ctx/nvidia/." "$bundle/lib/nvidia/" # so that ldd resolves them as the image will
  # The directories holding NVRTC and cuBLASLt, which laya-cuda opens by name (dlopen).
  dirs=$(find "$bundle/lib/nvidia" \( -name 'libnvrtc.so.13*' -o -name 'libcublasLt.so.13*' \) -printf '%h\n' | sort -u)
  [ -n "$dirs" ] || die "no libnvrtc.so.13 or libcublasLt.so.13 under $nvidia_libs/nvidia"
  for d in $dirs; do libpath=${libpath:+$libpath:}/opt/sys1rust/lib/nvidia/${d#"$bundle/lib/nvidia/"}; done
  header=$(find "$bundle/lib/nvidia" -path '*/include/cuda_runtime.h' -print -quit)
  [ -n "$header" ] || die "no include/cuda_runtime.h under $nvidia_libs/nvidia (nvidia-cuda-runtime)"
  cuda_home=$(dirname "$(dirname "$header")")
  cuda_home=/opt/sys1rust/lib/nvidia/${cuda_home#"$bundle/lib/nvidia/"}
fi

# 3. The root filesystem: the libraries outside the bundle that its ELF files need, as the
# dynamic loader resolves them here, flattened into /usr/lib/x86_64-linux-gnu (a directory
# the loader searches without an ld.so.cache), and the loader itself.
root=$ctx/rootfs
libdir=$root/usr/lib/x86_64-linux-gnu
# proc, dev and sys are the runtime's mount points.
mkdir -p "$libdir" "$root/usr/lib64" "$root/usr/local/bin" "$root/etc" "$root/tmp" "$ctx/data" \
  "$root/proc" "$root/dev" "$root/sys"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
chmod 1777 "$root/tmp"
ln -s /opt/sys1rust/bin/sys1rust "$root/usr/local/bin/sys1rust"

elves=$(find "$bundle/bin" "$bundle/lib" -type f \( -perm -u+x -o -name '*.so*' \) -print |
  while read -r f; do if [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ]; then echo "$f"; fi; done)
[ -n "$elves" ] || die "no ELF files in the bundle"
resolved=$ctx/ldd.txt
missing=$ctx/missing.txt
: >"$resolved"
: >"$missing"
while read -r f; do
  # ldd says "not a dynamic executable" for static files; those need nothing.
  LD_LIBRARY_PATH=${libpath//\/opt\/sys1rust/$bundle} ldd "$f" 2>/dev/null |
    awk -v missing="$missing" '
      $2 == "=>" && $3 == "not" { print $1 >> missing; next }
      $2 == "=>" && $3 ~ /^\// { print $1, $3; next }
      $1 ~ /^\// && $1 ~ /ld-linux/ { print "ld-linux-x86-64.so.2", $1 }' >>"$resolved" || true
done <<<"$elves"
# The driver's libraries come from the host at run time, mounted by the NVIDIA toolkit.
if [ "$flavor" = cuda13 ]; then sed -i -E '/^lib(cuda|nvidia-[a-z-]+)\.so(\.[0-9]+)*$/d' "$missing"; fi
if [ -s "$missing" ]; then
  die "these libraries are linked but not found on this host: $(sort -u "$missing" | tr '\n' ' ')"
fi
sort -u "$resolved" | while read -r soname path; do
  case $path in "$bundle"/*) continue ;; esac
  if [ ! -e "$libdir/$soname" ]; then
    cp -L "$path" "$libdir/$soname"
    say "system library $soname ($path)"
  fi
done
[ -e "$libdir/ld-linux-x86-64.so.2" ] || die "ldd named no dynamic loader"
ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/usr/lib64/ld-linux-x86-64.so.2"
[ "$flavor" != cpu ] || [ -e "$libdir/libopenblas.so.0" ] || die "the binary does not resolve libopenblas.so.0"

# The licenses of what was copied, where Debian keeps them.
if command -v dpkg >/dev/null; then
  sort -u "$resolved" | while read -r _ path; do
    case $path in "$bundle"/*) continue ;; esac
    # dpkg knows a file by the path its package installed, which merged-/usr systems
    # reach through /lib as well as /usr/lib.
    real=$(readlink -f "$path")
    pkg=
    for p in "$path" "$real" "${real#/usr}"; do
      pkg=$(dpkg -S "$p" 2>/dev/null | head -n 1 | cut -d: -f1) && [ -n "$pkg" ] && break
    done
    if [ -n "$pkg" ] && [ -f "/usr/share/doc/$pkg/copyright" ]; then
      mkdir -p "$root/usr/share/doc/$pkg"
      cp "/usr/share/doc/$pkg/copyright" "$root/usr/share/doc/$pkg/copyright"
    fi
  done
else
  say "warning: no dpkg here, so the system libraries' copyright files are not in the image"
fi

# The service user (uid 10001, outside the range distributions give to people); the rest of
# /etc is what the resolver reads. Certificates are not needed: the hub client (rustls) has
# its root certificates compiled in.
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/sbin/nologin
sys1rust:x:10001:10001:sys1rust:/data:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
sys1rust:x:10001:
nogroup:x:65534:
EOF
cat >"$root/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files dns
EOF
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"

# 4. The image.
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
# The bundle's own timestamp (build-bundle.sh sets it from the last commit), so that a rebuild
# from one bundle labels the image alike.
created=$(date -u -r "$bundle/VERSION" +%Y-%m-%dT%H:%M:%SZ)
rm -rf "$ctx/unpacked"
build_args=(--build-arg "BUNDLE=$name" --build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "CREATED=$created")
if [ "$flavor" = cuda13 ]; then
  build_args+=(--build-arg "NVIDIA_LIBRARY_PATH=$libpath" --build-arg "NVIDIA_CUDA_HOME=$cuda_home")
fi
say "building $tag from $name (context $ctx)"
# chroot isolation: the Containerfiles run nothing, so no runtime (and no rlimits or
# namespaces a nested container may lack) is needed. Docker format keeps the HEALTHCHECK.
"$buildah" bud --quiet --isolation chroot --format docker --layers=false \
  "${build_args[@]}" -f "$here/Containerfile.$flavor" -t "$tag" "$ctx" >&2

if [ -n "$archive" ]; then
  rm -f "$archive"
  "$buildah" push --quiet "$tag" "docker-archive:$archive:$tag" >&2
  say "wrote $archive"
fi

if [ "$verify" = 1 ]; then
  # The loader finds the bundle's libraries through $ORIGIN, which it reads from
  # /proc/self/exe: the check mounts a proc inside the image root in a mount namespace of its
  # own, so nothing stays mounted on this host. (Expanded by the inner bash, hence quoted.)
  # shellcheck disable=SC2016
  check='set -e
    ctr=$("$0" from --quiet --pull=never "$1")
    trap "\"$0\" rm \"$ctr\" >/dev/null" EXIT
    mnt=$("$0" mount "$ctr")
    unshare --mount --pid --fork sh -c "mount -t proc proc \"$mnt/proc\" 2>/dev/null || mount --rbind /proc \"$mnt/proc\"; exec chroot --userspec=10001:10001 \"$mnt\" /usr/local/bin/sys1rust --version"'
  if [ "$(id -u)" = 0 ]; then
    out=$(bash -c "$check" "$buildah" "$tag") || die "sys1rust --version failed inside $tag"
  else
    out=$("$buildah" unshare bash -c "$check" "$buildah" "$tag") || die "sys1rust --version failed inside $tag"
  fi
  say "inside the image: $out"
fi

# Bytes, uncompressed, as podman reports them; buildah alone only gives a rounded figure.
if command -v podman >/dev/null && size=$(podman image inspect --format '{{.Size}}' "$tag" 2>/dev/null); then
  :
else
  size=$("$buildah" images --format '{{.Size}}' "$tag" | tr -d ' ')
fi
case $size in
  *[!0-9]*) say "$tag: $size" ;;
  *) say "$tag: $size bytes ($(awk -v b="$size" 'BEGIN { printf "%.1f MiB", b / 1048576 }'))" ;;
esac
echo "$tag $size"

#!/usr/bin/env bash
# tests/docker_build.sh — builds the repository's Dockerfile (docs/gpu.md, "A
# container without the CUDA toolkit") without a docker daemon, with buildah,
# and runs the image: flynn doctor (no GPU: it must stop at the driver, and
# with a stub driver it must take the CUDA 12 plugin and the wheels' cuBLAS and
# cuDNN) and a short CPU training run. Prints PASS/FAIL per step; exit 0 when
# every step passed. Not in ctest: it downloads about 2.5 GB (apt and the CUDA
# 12 wheels, twice: the builder's toolchain and the image's libraries) and
# takes 15-30 minutes.
#
#   tests/docker_build.sh [--no-build] [REPO]   (REPO: default this checkout)
#     --no-build   run steps 4-8 on the image an earlier run built
#
# What it does, as root (apt-get install -y buildah; Debian 12 has 1.28):
#   1. base   `FROM debian:12` cannot be pulled where Docker Hub is not
#             reachable: the image docker.io/library/debian:12 is made from a
#             debootstrap --variant=minbase bookworm root, $FLYNN_DOCKER_BASE_TAR
#             (default /var/tmp/fresh-root.tar; made with `debootstrap
#             --variant=minbase bookworm DIR http://deb.debian.org/debian` and
#             `tar -C DIR -cf fresh-root.tar .`), and the build never pulls.
#   2. clone  a clean clone of REPO's HEAD is the build context: what is not
#             committed is not built.
#   3. build  buildah bud --isolation chroot, storage in $FLYNN_DOCKER_WORK
#             (default /var/tmp/flynn-docker), overlay where this kernel mounts
#             it, vfs otherwise ($STORAGE_DRIVER overrides).
#   4. size   the image's size.
#   5. ldd    every file of /opt/flynn resolves its libraries in the image,
#             but the plugin's libcublas.so.12, libcublasLt.so.12 and
#             libcudnn.so.9: flynn finds and loads those by absolute path
#             before the plugin (docs/gpu.md, step 6), so ldd cannot.
#   6. doctor no GPU: FAIL at the driver check, nothing after it.
#   7. stub   doctor with a stub libcuda (tests/stub_libcuda.c) reporting a 535
#             driver (CUDA 12.2), then a 580 one (13.0): the CUDA 12 plugin,
#             cuBLAS and cuDNN from /opt/nvidia are taken, the plugin loads and
#             its CUDA runtime starts; it stops there: the stub has no device,
#             nor the driver entry points (cuGetProcAddress) cudart 12.9 asks.
#   8. train  flynn train --epochs 1 --samples 2000 on the CPU, exit 0.
#
# A machine whose HTTPS goes through an intercepting proxy (its own CA in
# /usr/local/share/ca-certificates) gets that CA bundle mounted read-only into
# the build's RUN steps, with a pip.conf naming it; the image keeps neither
# ($FLYNN_DOCKER_BUILD_CA=file names a bundle, =none turns this off).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=1
[ "${1:-}" = --no-build ] && { build=0; shift; }
REPO=$(cd "${1:-$here/..}" && pwd)
WORK=${FLYNN_DOCKER_WORK:-/var/tmp/flynn-docker}
BASE_TAR=${FLYNN_DOCKER_BASE_TAR:-/var/tmp/fresh-root.tar}
IMAGE=${FLYNN_DOCKER_IMAGE:-flynn-gpu}
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
die() { fail "$*"; echo "docker_build: stopped ($fails failed)"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (buildah's chroot isolation and its storage need it)"
command -v buildah >/dev/null || die "buildah is not installed (apt-get install -y buildah)"
mkdir -p "$WORK"
if [ -z "${STORAGE_DRIVER:-}" ]; then
  t=$(mktemp -d "$WORK/ovl.XXXXXX")
  mkdir -p "$t/l" "$t/u" "$t/w" "$t/m"
  if mount -t overlay overlay -o "lowerdir=$t/l,upperdir=$t/u,workdir=$t/w" "$t/m" 2>/dev/null; then
    umount "$t/m"
    STORAGE_DRIVER=overlay
  else
    STORAGE_DRIVER=vfs
  fi
  rm -rf "$t"
fi
b() { buildah --root "$WORK/storage" --runroot "$WORK/run" --storage-driver "$STORAGE_DRIVER" "$@"; }
echo "docker_build: buildah $(buildah --version | awk '{print $3}'), storage $STORAGE_DRIVER in $WORK, $(date -u +%FT%TZ)"

if [ $build = 1 ]; then
# 1. the base image
if b inspect --type image docker.io/library/debian:12 >/dev/null 2>&1; then
  pass "base: docker.io/library/debian:12 is in the store (from an earlier run)"
else
  [ -f "$BASE_TAR" ] || die "base: $BASE_TAR is missing (a debootstrap --variant=minbase bookworm root as a tar)"
  c=$(b from scratch) || die "base: buildah from scratch"
  if b add "$c" "$BASE_TAR" / >/dev/null &&
     b config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd bash \
       --os linux --arch amd64 "$c" &&
     b commit -q "$c" docker.io/library/debian:12 >/dev/null; then
    pass "base: docker.io/library/debian:12 from $BASE_TAR (Debian $(b run --isolation chroot "$c" cat /etc/debian_version 2>/dev/null))"
  else
    b rm "$c" >/dev/null 2>&1
    die "base: could not make debian:12 from $BASE_TAR"
  fi
  b rm "$c" >/dev/null
fi

# 2. a clean clone
src=$WORK/src
rm -rf "$src"
if git clone -q --no-hardlinks "$REPO" "$src"; then
  pass "clone: $(git -C "$src" log -1 --format='%h %s' | cut -c1-80)"
  [ -n "$(git -C "$REPO" status --porcelain)" ] && echo "  note: $REPO has uncommitted changes; they are not in the build"
else
  die "clone: git clone $REPO"
fi

# 3. the build
vols=()
ca=${FLYNN_DOCKER_BUILD_CA:-}
if [ -z "$ca" ] && ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  ca=/etc/ssl/certs/ca-certificates.crt
fi
if [ -n "$ca" ] && [ "$ca" != none ]; then
  printf '[global]\ncert = /run/flynn-build-ca.crt\n' > "$WORK/pip.conf"
  vols=(-v "$ca:/run/flynn-build-ca.crt:ro" -v "$WORK/pip.conf:/etc/pip.conf:ro")
  echo "  note: the build's RUN steps get $ca (this machine's CA bundle) for pip"
fi
log=$WORK/build.log
t0=$(date +%s)
if (cd "$src" && b bud --isolation chroot --pull=never --layers "${vols[@]}" -t "$IMAGE" -f Dockerfile .) > "$log" 2>&1; then
  pass "build: buildah bud -t $IMAGE in $(( $(date +%s) - t0 )) s (log: $log)"
else
  tail -30 "$log"
  die "build: buildah bud failed after $(( $(date +%s) - t0 )) s (log: $log)"
fi
else
  echo "  (--no-build: the image $IMAGE from an earlier run)"
fi

# 4. size
size=$(b images --format '{{.Size}}' "$IMAGE" 2>/dev/null | head -1)
if [ -n "$size" ]; then
  pass "size: $IMAGE is $size (buildah images: uncompressed layers; debian:12 is $(b images --format '{{.Size}}' docker.io/library/debian:12 | head -1))"
else
  fail "size: buildah images does not list $IMAGE"
fi

c=$(b from --pull=never "$IMAGE") || die "run: buildah from $IMAGE"
trap 'b rm "$c" >/dev/null 2>&1' EXIT
run() { b run --isolation chroot "$@"; }

# 5. the loader
out=$(run "$c" sh -c 'for f in /opt/flynn/bin/* /opt/flynn/lib/*.so*; do [ -L "$f" ] || { echo "== $f"; ldd "$f"; }; done' 2>&1)
# the plugins' cuBLAS and cuDNN are loaded by flynn, by absolute path, first
missing=$(echo "$out" | awk '/^== /{f=$2; next}
  /not found/ && !(f ~ /libflynn_cuda/ && $1 ~ /^lib(cublas|cublasLt|cudnn)\.so\./) {print f ": " $1}')
if [ -n "$missing" ]; then
  echo "$missing"
  fail "ldd: a library is missing in the image"
else
  pass "ldd: every file of /opt/flynn resolves ($(echo "$out" | grep -c '^==') files; the plugin's cuBLAS and cuDNN are flynn's to load)"
fi

# 6. doctor, no GPU
out=$(run "$c" flynn doctor 2>&1); rc=$?
echo "$out" | sed -n '/ 1\. /,/ 3\. /p' | sed 's/^/  | /'
if [ $rc = 1 ] && echo "$out" | grep -Eq '^ *2\. driver +FAIL' && echo "$out" | grep -q 'Result = FAIL'; then
  if echo "$out" | grep -q -- '--gpus all'; then
    pass "doctor: stops at the driver, with the container remedy (--gpus all)"
  else
    pass "doctor: stops at the driver (this run was not recognised as a container: no --gpus all remedy)"
  fi
else
  echo "$out"
  fail "doctor: expected exit 1 and a FAIL at the driver check, got exit $rc"
fi
echo "  container markers: $(run "$c" sh -c 'ls -d /.dockerenv /run/.containerenv 2>/dev/null; head -3 /proc/1/cgroup' 2>&1 | tr '\n' ' ')"

# 7. doctor with a stub driver
stub=$WORK/stub
mkdir -p "$stub"
if cc -shared -fPIC -O2 -o "$stub/libcuda.so.1" "$REPO/tests/stub_libcuda.c"; then
  for v in 535:12020 580:13000; do
    drv=${v%%:*} cuv=${v#*:}
    echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  $drv.00  (docker_build stub)" > "$stub/version-$drv"
    out=$(run -v "$stub:/stub:ro" "$c" env FLYNN_NVIDIA_PROC="/stub/version-$drv" FLYNN_LIBCUDA=/stub/libcuda.so.1 \
          STUB_CUDA_VERSION=$cuv flynn doctor 2>&1); rc=$?
    echo "$out" | grep -E '^ *[0-9]+\. (driver_version|cublas|cudnn|plugin|device) ' | sed 's/^/  | /' | cut -c1-220
    if [ $rc = 1 ] &&
       echo "$out" | grep -Eq '^ *4\. driver_version +PASS.*taking the CUDA 12 plugin' &&
       echo "$out" | grep -Eq '^ *5\. cublas +PASS.*/opt/nvidia/' &&
       echo "$out" | grep -Eq '^ *6\. cudnn +PASS.*/opt/nvidia/' &&
       echo "$out" | grep -Eq '^ *7\. plugin +PASS.*libflynn_cuda12\.so' &&
       echo "$out" | grep -Eq '^ *8\. cudart +PASS'; then
      pass "stub $drv driver: the CUDA 12 plugin and /opt/nvidia's cuBLAS and cuDNN are taken and loaded; stops at: $(echo "$out" | grep -E '^ *[0-9]+\. [a-z_]+ +FAIL' | head -1 | sed 's/^ *//' | cut -c1-120)"
    else
      echo "$out"
      fail "stub $drv driver: expected the CUDA 12 plugin with /opt/nvidia's libraries (exit $rc)"
    fi
  done
else
  fail "stub: cc could not build tests/stub_libcuda.c"
fi

# 8. a short CPU training run
t0=$(date +%s)
out=$(run "$c" flynn train --epochs 1 --samples 2000 2>&1); rc=$?
echo "$out" | grep -E '^device|^Epoch|loss|accuracy' | tail -4 | sed 's/^/  | /' | cut -c1-200
if [ $rc = 0 ]; then
  pass "train: flynn train --epochs 1 --samples 2000 on the CPU in $(( $(date +%s) - t0 )) s"
else
  echo "$out" | tail -20
  fail "train: exit $rc"
fi

echo "docker_build: $([ $fails = 0 ] && echo PASS || echo "FAIL ($fails failed)")"
[ $fails = 0 ]

# shellcheck shell=bash
# tests/gpu/bundle.sh — the GPU bundle's shared shell functions, sourced by
# prepare.sh (which packs it), run.sh (which unpacks and checks it on the GPU
# machine) and prove-bundle.sh (which does the same in a bare root here), so
# that all three treat the bundle the same way.
#
# The bundle, .gpu/flynn-gpu.tar.gz (gzip: a bare Debian root, debootstrap's
# minbase, has tar and gzip but no xz; the .tar.xz it was could not be unpacked
# there, issue 44), holds
#   bin/  flynn, test_gpu_parity
#   lib/  libflynn.so.0, libflynn_cuda.so, and the whole `ldd` closure of
#         the four except glibc, libstdc++ and libgcc_s (the target has its
#         own; Debian's libgcc_s would need glibc 2.35) and the CUDA
#         libraries (the target's driver and pip wheels provide those)
#   MANIFEST.txt  what was packed, from where, and the glibc it needs
# and is used with LD_LIBRARY_PATH=<dir>/lib for flynn's commands only.

# libraries left to the target: glibc's, the C++ runtime, and CUDA's
BUNDLE_SYSTEM_RE='^(ld-linux[-a-z0-9_]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec|libnsl|libBrokenLocale|libthread_db|libstdc\+\+|libgcc_s)\.so'
BUNDLE_CUDA_RE='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnvrtc[-a-z_]*|libnvJitLink)\.so'
BUNDLE_LOADER=/lib64/ld-linux-x86-64.so.2

# bundle_closure FILE... : "soname path" of every library FILE... load, as
# this machine's loader resolves them, less BUNDLE_SYSTEM_RE and BUNDLE_CUDA_RE
bundle_closure() {
  ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    grep -vE "^(${BUNDLE_SYSTEM_RE#^}|${BUNDLE_CUDA_RE#^})" || true
}

# bundle_unpack TARBALL DEST : a fresh DEST with the bundle in it (tar and
# gzip, or Python's tarfile where tar is missing)
bundle_unpack() {
  local tarball=$1 dest=$2
  rm -rf "$dest" && mkdir -p "$dest" || return 1
  if command -v tar >/dev/null 2>&1 && command -v gzip >/dev/null 2>&1; then
    tar -xzf "$tarball" -C "$dest"
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$tarball" "$dest"
  fi
}

# bundle_pack STAGE TARBALL : STAGE's bin, lib and MANIFEST.txt as a .tar.gz
bundle_pack() {
  tar -C "$1" -czf "$2" bin lib MANIFEST.txt
}

# bundle_exec ROOT VAR=VALUE... -- CMD... : runs CMD with VAR=VALUE... added
# to the environment, or, when ROOT is not empty, inside chroot ROOT with
# those variables alone (through Python's os.chroot, so that no dynamically
# linked program stands in between for LD_* variables to act on), under
# `timeout -k 5 $BUNDLE_TIMEOUT` when that is set
bundle_exec() {
  local root=$1; shift
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  if [ -z "$root" ]; then
    ( for v in "${vars[@]}"; do export "${v?}"; done; exec "$@" )
  else
    ${BUNDLE_TIMEOUT:+timeout -k 5 "$BUNDLE_TIMEOUT"} python3 -c 'import os, sys
root, n = sys.argv[1], int(sys.argv[2])
env = dict(v.split("=", 1) for v in sys.argv[3:3 + n])
os.chroot(root); os.chdir("/")
os.execve(sys.argv[3 + n], sys.argv[3 + n:], env)' "$root" "${#vars[@]}" "${vars[@]}" "$@"
  fi
}

# bundle_ldd DIR [ROOT] : ldd (the loader with LD_TRACE_LOADED_OBJECTS=1, as
# ldd runs it) of every ELF file in DIR/bin and DIR/lib with
# LD_LIBRARY_PATH=DIR/lib, inside chroot ROOT when ROOT is given (DIR is then
# a path inside ROOT). Prints one line per program
# and flynn library (every file with BUNDLE_LDD_ALL=1): how many libraries
# came from the bundle and which from the system (a "!" marks one that is
# neither glibc, the C++ runtime nor CUDA); every "not found" in full. CUDA
# libraries not found are only noted: flynn loads them itself at run time
# (FLYNN_CUDA_LIB_PATH, pip wheels). Returns 1 when anything else is not
# found (including "version `GLIBC_2.xx' not found").
bundle_ldd() {
  local dir=$1 root=${2:-} f name out bad=0 nb sys cuda missing n=0 quiet=0 l all_sys=""
  for f in "$root$dir"/bin/* "$root$dir"/lib/*; do
    [ -f "$f" ] || continue
    f=${f#"$root"}
    name=${f#"$dir"/}
    n=$((n + 1))
    out=$(bundle_exec "$root" LD_TRACE_LOADED_OBJECTS=1 LD_LIBRARY_PATH="$dir/lib" -- "$BUNDLE_LOADER" "$f" 2>&1)
    nb=$(grep -c "=> $dir/lib/" <<<"$out")
    sys=""
    for l in $(awk -v d="$dir/lib/" '$2 == "=>" && $3 ~ /^\// && index($3, d) != 1 {print $1}' <<<"$out"); do
      grep -qE "$BUNDLE_SYSTEM_RE|$BUNDLE_CUDA_RE" <<<"$l" || l="$l!"
      sys="$sys${sys:+ }$l"
      case " $all_sys " in *" $l "*) ;; *) all_sys="$all_sys${all_sys:+ }$l" ;; esac
    done
    cuda=$(grep "not found" <<<"$out" | awk '{print $1}' | grep -E "$BUNDLE_CUDA_RE" | tr '\n' ' ')
    missing=$(grep "not found" <<<"$out" | grep -vE "^[[:space:]]*(${BUNDLE_CUDA_RE#^})[^ ]* => not found")
    grep -qE "=>|linux-vdso|statically linked" <<<"$out" || missing="${missing}${missing:+$'\n'}ldd failed: $(head -3 <<<"$out")"
    if [ "${BUNDLE_LDD_ALL:-0}" = 1 ] || [ -n "$missing" ] || [[ $name == bin/* || $name == lib/libflynn* ]]; then
      printf '  %-26s %2d from the bundle; system: %s%s\n' "$name" "$nb" "${sys:-none}" \
        "${cuda:+; CUDA, loaded at run time: ${cuda% }}"
    else
      quiet=$((quiet + 1))
    fi
    if [ -n "$missing" ]; then
      bad=1
      sed 's/^[[:space:]]*/    NOT FOUND: /' <<<"$missing"
    fi
  done
  [ $quiet -gt 0 ] && echo "  and $quiet more libraries, all resolved"
  echo "  $n files; from the system: ${all_sys:-nothing}$([[ $all_sys == *!* ]] && echo " (!: not glibc, C++ or CUDA, yet not taken from the bundle)"); $([ $bad = 0 ] && echo "nothing missing" || echo "SOME NOT FOUND")"
  return $bad
}

# bundle_needs DIR : the newest symbol versions the bundle's files require
# from the system (objdump, from binutils, on the machine that has it)
bundle_needs() {
  local dir=$1 v
  for v in GLIBC GLIBCXX CXXABI GCC; do
    printf '%s ' "$(find "$dir" -type f \( -name '*.so*' -o -perm -u+x \) -exec objdump -p {} + 2>/dev/null |
      grep -oE "[[:space:]]${v}_[0-9.]+\$" | grep -oE "${v}_[0-9.]+" | sort -uV | tail -1)"
  done | sed 's/  */ /g; s/ $//'
  echo
}

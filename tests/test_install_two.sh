#!/usr/bin/env bash
# test_install_two.sh — two flynn installs side by side, as a CPU-only
# install next to a GPU one (what the seed's conda environments were for):
# cmake --install into two prefixes; prefix A without any CUDA plugin,
# prefix B with its plugins (installed where they are built, then replaced by
# stand-ins, tests/stub_cuda_plugin.c, since no real cuBLAS is at hand). Each flynn must load its own
# libflynn (RUNPATH $ORIGIN/../lib, no LD_LIBRARY_PATH) and look for its
# plugin next to it, never in the other prefix; B still works after the
# prefix is moved.
# usage: test_install_two.sh BUILD_DIR STUB_LIBCUDA_DIR STUB_PLUGIN_DIR STUB_LIBS13 STUB_LIBS12
set -u
build=$1 STUB=$2 PLUGINS=$3 LIBS13=$4 LIBS12=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

cmake --install "$build" --prefix "$tmp/A" >/dev/null || { echo "cmake --install A failed" >&2; exit 1; }
cmake --install "$build" --prefix "$tmp/B" >/dev/null || { echo "cmake --install B failed" >&2; exit 1; }
libA=$(ls -d "$tmp"/A/lib*/ | head -1); libA=${libA%/}
libB=$(ls -d "$tmp"/B/lib*/ | head -1); libB=${libB%/}
# A: CPU only
rm -f "$libA"/libflynn_cuda*.so
# B: the plugins cmake --install put there (those the build has), then the
# stand-ins in their place: the stub cuBLAS below cannot serve a real one
for p in libflynn_cuda.so libflynn_cuda12.so; do
  if [ -f "$build/$p" ]; then [ -f "$libB/$p" ] && ok || bad "cmake --install did not install $p"; fi
  cp "$PLUGINS/$p" "$libB/$p"
done

readelf -d "$tmp/A/bin/flynn" | grep -qE 'RUN?PATH.*\$ORIGIN/\.\./lib' && ok || { bad "flynn's RUNPATH is not \$ORIGIN/../lib"; readelf -d "$tmp/A/bin/flynn" | grep -i path >&2; }

# the fake machine: a 570 driver (CUDA 12.8), the CUDA 12 stub libraries
echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  (test stub)" > "$tmp/version"
drv=(env -u LD_LIBRARY_PATH -u FLYNN_CUDA_PLUGIN -u FLYNN_CUDA_PLUGIN_DIR FLYNN_NVIDIA_PROC="$tmp/version"
     FLYNN_LIBCUDA="$STUB/libcuda.so.1" STUB_CUDA_VERSION=12080 FLYNN_CUDA_LIB_PATH="$LIBS12")

for P in A B; do
  lib=$libA; [ $P = B ] && lib=$libB
  # its own libflynn, found through the RUNPATH
  got=$(env -u LD_LIBRARY_PATH ldd "$tmp/$P/bin/flynn" | awk '/libflynn\.so/ {print $3}')
  [ "$(readlink -f "$got")" = "$(readlink -f "$lib/libflynn.so.0")" ] && ok || bad "$P: flynn loads '$got', expected $lib/libflynn.so.0"
  out=$(env -u LD_LIBRARY_PATH "$tmp/$P/bin/flynn" train --device cpu --samples 64 --epochs 1 --test-samples 100 2>&1) \
    && grep -q "^test accuracy: " <<<"$out" && ok || { bad "$P: flynn train"; echo "$out" | tail -3 >&2; }
done

# A has no plugin: the doctor says so, naming A's folder, not B's
out=$("${drv[@]}" "$tmp/A/bin/flynn" doctor 2>&1)
grep -qE "^ *[0-9]+\. plugin +FAIL .*the flynn CUDA plugin cannot be loaded \($libA/" <<<"$out" && ok || { bad "A: doctor should miss the plugin in $libA"; echo "$out" >&2; }
grep -q "$tmp/B" <<<"$out" && { bad "A's doctor mentions B"; echo "$out" >&2; } || ok
# B takes its own CUDA 12 plugin for the 570 driver
out=$("${drv[@]}" "$tmp/B/bin/flynn" doctor 2>&1)
grep -qE "^ *[0-9]+\. plugin +PASS +$libB/libflynn_cuda12.so \(CUDA 12\)" <<<"$out" && ok || { bad "B: doctor should take $libB/libflynn_cuda12.so"; echo "$out" >&2; }
grep -q "$tmp/A" <<<"$out" && { bad "B's doctor mentions A"; echo "$out" >&2; } || ok

# B moved elsewhere keeps working, with its plugin at the new place
mv "$tmp/B" "$tmp/B-moved"
libM=${libB/$tmp\/B/$tmp/B-moved}
out=$("${drv[@]}" "$tmp/B-moved/bin/flynn" doctor 2>&1)
grep -qE "^ *[0-9]+\. plugin +PASS +$libM/libflynn_cuda12.so" <<<"$out" && ok || { bad "moved B: plugin not found at $libM"; echo "$out" >&2; }

echo "test_install_two: $pass passed, $fail failed"
[ $fail -eq 0 ]

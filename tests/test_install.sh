#!/usr/bin/env bash
# test_install.sh — installs flynn from a build tree into a temporary prefix
# and builds a consumer against it twice: with CMake's find_package(flynn)
# (shared and static) and with `pkg-config --cflags --libs flynn`.
# usage: test_install.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -f "$tmp/prefix/include/flynn/flynn.h"
test -x "$tmp/prefix/bin/flynn"
libdir=$(ls -d "$tmp"/prefix/lib*/ | head -1)
test -f "$libdir/pkgconfig/flynn.pc"
test -f "$libdir/cmake/flynn/flynnConfig.cmake"

cmake -S "$src/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
LD_LIBRARY_PATH="$libdir" "$tmp/consumer/consumer"
"$tmp/consumer/consumer_static"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags flynn) "$src/tests/install/consumer.c" \
   $(pkg-config --libs flynn) -o "$tmp/consumer_pc"
LD_LIBRARY_PATH="$libdir" "$tmp/consumer_pc"
# static: the same flags with libflynn.a in place of -lflynn
static_libs=$(pkg-config --static --libs flynn | sed "s|-lflynn|$libdir/libflynn.a|")
cc -std=c11 $(pkg-config --cflags flynn) "$src/tests/install/consumer.c" $static_libs -o "$tmp/consumer_pc_static"
"$tmp/consumer_pc_static"
"$tmp/consumer_pc_static"
echo "test_install: find_package and pkg-config consumers built and ran"

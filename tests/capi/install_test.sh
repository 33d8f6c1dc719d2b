#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then a C program built against the installed tree with
# `pkg-config --cflags --libs cortiq` (shared), again with `--static`, and once through the CMake
# package (find_package(Cortiq)): each must print what `cortiq run --raw --greedy` printed.
# Usage: install_test.sh BUILD_DIR HELLO_C FIXTURE_DIR
set -euo pipefail
build=$1
hello=$2
fix=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/p" >/dev/null
pc=$(find "$tmp/p" -name cortiq.pc)
[ -n "$pc" ] || { echo "not installed: cortiq.pc"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
lib=$(pkg-config --variable=libdir cortiq)
for f in "$tmp/p/bin/cortiq" "$tmp/p/include/cortiq.h" "$lib/libcortiq.a" "$lib/libcortiq.so" \
  "$lib/cmake/Cortiq/CortiqConfig.cmake"; do
  [ -e "$f" ] || { echo "not installed: $f"; exit 1; }
done
# only the C API is exported from the shared library
if nm -D --defined-only "$lib/libcortiq.so" | awk '{print $3}' | grep -v '^cortiq_' | grep -q .; then
  echo "libcortiq.so exports symbols outside the C API:"
  nm -D --defined-only "$lib/libcortiq.so" | grep -v ' cortiq_' | head
  exit 1
fi
want=$(cat "$fix/greedy.txt")
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror -o "$tmp/hello" "$hello" $(pkg-config --cflags --libs cortiq) -Wl,-rpath,"$lib"
got=$("$tmp/hello" "$fix/s.cmf" "Once upon a time")
[ "$got" = "$want" ] || { printf 'shared: got [%s]\nwant [%s]\n' "$got" "$want"; exit 1; }
# shellcheck disable=SC2046
cc -std=c11 -o "$tmp/hello_static" "$hello" $(pkg-config --static --cflags cortiq) "$lib/libcortiq.a" \
  $(pkg-config --static --libs-only-l cortiq | sed 's/-lcortiq//')
got=$("$tmp/hello_static" "$fix/s.cmf" "Once upon a time")
[ "$got" = "$want" ] || { printf 'static: got [%s]\nwant [%s]\n' "$got" "$want"; exit 1; }
if ldd "$tmp/hello_static" | grep -q libcortiq; then echo "hello_static links libcortiq.so"; exit 1; fi
mkdir -p "$tmp/proj"
cp "$hello" "$tmp/proj/hello.c"
cat >"$tmp/proj/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(hello C)
find_package(Cortiq 0.1 REQUIRED)
add_executable(hello hello.c)
target_link_libraries(hello PRIVATE cortiq::cortiq)
CM
cmake -S "$tmp/proj" -B "$tmp/proj/b" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/p" \
  -DCMAKE_BUILD_RPATH="$lib" >/dev/null
cmake --build "$tmp/proj/b" >/dev/null
got=$("$tmp/proj/b/hello" "$fix/s.cmf" "Once upon a time")
[ "$got" = "$want" ] || { printf 'cmake package: got [%s]\nwant [%s]\n' "$got" "$want"; exit 1; }
echo "install test: shared, static and CMake-package builds print the greedy text"

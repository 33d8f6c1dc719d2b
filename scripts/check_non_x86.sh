#!/usr/bin/env bash
# Compile check for CPUs other than x86: the sources and tests that can differ on other CPUs are
# compiled with clang for aarch64 (-fsyntax-only: no cross toolchain or ARM libraries
# needed), using this machine's headers. It catches x86 intrinsics, headers and builtins outside
# the x86-guarded SIMD tiers (src/kernels/simd_*.cc, src/kernels/avx512/, src/kernels/avx2/,
# src/kernels/attention/*.cc; their stand-ins are simd_portable.cc).
# Usage: scripts/check_non_x86.sh   (needs clang; exit status 1 and the errors when a file fails)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang++ >/dev/null || { echo "check_non_x86: clang++ not installed" >&2; exit 1; }
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
# The host's glibc headers pick their word size and stub list by __x86_64__: give the aarch64
# compile the LP64 answers.
mkdir -p "$shim/gnu" "$shim/bits"
: >"$shim/gnu/stubs-32.h"
printf '#define __WORDSIZE 64\n#define __WORDSIZE_TIME64_COMPAT32 1\n#define __SYSCALL_WORDSIZE 64\n' \
  >"$shim/bits/wordsize.h"
gcc_ver=$(ls /usr/include/c++ | sort -V | tail -1)
multi=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
export SHIM="$shim" GCCV="$gcc_ver" MULTI="$multi"
check() {
  clang++ --target=aarch64-linux-gnu -std=c++20 -fsyntax-only -Wno-everything -Isrc -Iinclude -Itests -isystem "$SHIM" \
    -isystem "/usr/include/c++/$GCCV" -isystem "/usr/include/$MULTI/c++/$GCCV" -isystem /usr/include \
    -isystem "/usr/include/$MULTI" -DFMT_SHARED -DCORTIQ_SOURCE_DIR='"."' -DCORTIQ_CLI_PATH='"cortiq"' "$1" \
    2>&1 | grep -E "error:" | sed "s|^|$1: |" || true
}
export -f check
# Which files can differ on aarch64: the kernels layer (where the SIMD tiers live), any file that
# names an x86 header, intrinsic, vector type, builtin or predefined macro, and any file that
# includes a kernels/simd_*.h header. Every other file compiles from the same portable text on
# both, so checking it again buys nothing (checking all ~200 files took 4 of CI's 45 minutes).
X86='immintrin|intrin\.h|cpuid|_mm[0-9]*_|__m(64|128|256|512)|__builtin_ia32|__builtin_cpu_|__rdtsc|__asm__|__x86_64__|__AVX|__SSE'
files=$( { ls src/kernels/*.cc src/kernels/*/*.cc; grep -lE "$X86" src/*/*.cc src/*/*/*.cc tests/*.cc 2>/dev/null || true
           grep -lE '#include "kernels/simd_[a-z0-9_]*\.h"' src/*/*.cc src/*/*/*.cc tests/*.cc 2>/dev/null || true
         } | grep -v "_fuzz\.cc$" | sort -u)
out=$(echo "$files" | xargs -P "$(nproc)" -I{} bash -c 'check {}')
if [ -n "$out" ]; then
  echo "$out"
  echo "check_non_x86: these files do not compile for aarch64" >&2
  exit 1
fi
echo "check_non_x86: $(echo "$files" | wc -l) files that can differ on aarch64 compile for it"

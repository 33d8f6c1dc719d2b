#!/usr/bin/env bash
# Installs every build and test dependency (Debian bookworm packages) and builds Release into build/.
# Usage: scripts/setup.sh            (run from anywhere; uses sudo when not root)
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
PKGS=(cmake ninja-build g++ clang pkg-config git
      nlohmann-json3-dev libcli11-dev libfmt-dev libssl-dev libonig-dev libutf8proc-dev
      libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev libedit-dev
      python3 python3-numpy python3-jinja2
      chromium)  # headless browser tests: the chat page (tests/clients/page_test.mjs), compile --report
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The OpenAI-client end-to-end tests drive `cortiq serve` with the official npm package, and the
# chat page's test drives chromium with playwright-core.
if command -v npm >/dev/null 2>&1 && [ ! -d tests/clients/node_modules/playwright-core ]; then
  echo "setup: installing the openai and playwright-core npm packages for the serve tests (tests/clients)"
  npm ci --prefix tests/clients --no-audit --no-fund --loglevel=error || echo "setup: npm ci failed; serve client tests will skip"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${CORTIQ_CMAKE_FLAGS:-}
cmake --build build -j"$(nproc)"
echo "setup: built build/cortiq"

#!/usr/bin/env bash
# Installs the Debian 12 packages that memcg's build, tests, tools and benchmarks need.
# Idempotent: does nothing when everything is present. Needs root (or sudo) only to install.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config ccache
  libgtest-dev libgmock-dev libbenchmark-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libxml2-utils
  dpkg-dev
  libjemalloc-dev
  librocksdb-dev
  libsqlite3-dev
  libcpp-httplib-dev libmicrohttpd-dev prometheus prometheus-cpp-dev
  clang-19 libclang-rt-19-dev
  chromium
  golang-go
  python3-setuptools python3-wheel python3-venv python3-pip
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "memcg setup: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

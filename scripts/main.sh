#!/usr/bin/env bash
# The main job: installs what it needs, builds memcgctl (default preset), then runs the memory.min
# protection scenario through memcgctl and writes its plot to out/protection.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default --target memcgctl  # only what the scenario needs
mkdir -p out
./build/default/tools/memcgctl/memcgctl run examples/protection.yaml --plot out/protection.svg
echo "plot: out/protection.svg"

#!/usr/bin/env bash
# The main job: installs what it needs, builds the default preset and runs the example.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default
./build/default/examples/example_hierarchy

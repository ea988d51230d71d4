#!/usr/bin/env bash
# The whole test suite: installs what it needs, then configures, builds and runs every test of
# the default preset (RelWithDebInfo, g++), the install/find_package check included.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --workflow --preset default

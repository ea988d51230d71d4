#!/usr/bin/env bash
# Regenerates the golden reports of the example scenarios: tests/golden/NAME.txt (text report)
# and tests/golden/NAME.json (--json) for every examples/NAME.yaml, from a build of the default
# preset. Run it after a deliberate change of the library's behaviour or of the report format,
# and review the diff before committing it: memcgctl_run_test compares against these files.
#
#   scripts/update-golden.sh [BUILD_DIR]     (default build/default)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/default}
cmake --build "$build" -j "${JOBS:-2}" --target memcgctl
ctl=$build/tools/memcgctl/memcgctl
mkdir -p "$root/tests/golden"
cd "$root"
for f in examples/*.yaml; do
  name=$(basename "$f" .yaml)
  # The exit status says whether the checks passed; the golden files record either outcome.
  "$ctl" run "$f" >"tests/golden/$name.txt" || [ $? -eq 1 ]
  "$ctl" run "$f" --json >"tests/golden/$name.json" || [ $? -eq 1 ]
  echo "tests/golden/$name.{txt,json}: $(tail -n1 "tests/golden/$name.txt")"
done

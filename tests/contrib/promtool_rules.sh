#!/bin/sh
# promtool_rules.sh PROMTOOL check|test FILE: `promtool check rules FILE` or `promtool test rules
# FILE`, run in FILE's folder (a test file names its rule files relative to it). Exits 77 (CTest's
# skip code) with a message only when promtool is not installed.
set -eu
promtool=$1 what=$2 file=$3
if [ -z "$promtool" ] || [ ! -x "$promtool" ]; then
  echo "promtool is not installed (Debian package 'prometheus', scripts/setup.sh): skipped"
  exit 77
fi
cd "$(dirname "$file")"
exec "$promtool" "$what" rules "$(basename "$file")"

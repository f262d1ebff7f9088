#!/usr/bin/env bash
# docs/config.md must be what `lftrain --help-config --markdown` prints (run `make docs`).
set -u
lftrain=$1; doc=$2
if diff -u "$doc" <("$lftrain" --help-config --markdown); then
  echo "docs/config.md is current"
else
  echo "docs/config.md is stale: run \`make docs\` and commit it"; exit 1
fi

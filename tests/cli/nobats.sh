#!/bin/sh
# Stands in for the CLI tests (tests/cli/*.bats) when bats is not installed: the whole file is
# reported as skipped, with the fix, so `make test` still works on a machine with build tools
# only. CI installs bats first (.ci/run), so there they always run.
echo "1..0 # SKIP the CLI tests need bats: apt-get install bats (or npm install -g bats)"

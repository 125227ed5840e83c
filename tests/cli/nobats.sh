#!/bin/sh
# Stands in for the CLI tests (tests/cli/*.bats) when bats is not installed, so that
# `make test` fails with the fix instead of skipping them.
echo "1..1"
echo "not ok 1 - the CLI tests need bats: apt-get install bats (or npm install -g bats)"
exit 1

#!/usr/bin/env bash
# Replays the committed fuzz corpora (tests/fuzz/corpus/NAME) through the fuzz targets built
# with the project's compiler and the current pass's sanitizers, so every `make test` pass
# checks that no input that once mattered breaks a check, with or without libFuzzer.
. "$TOP/tests/tap.sh"

for name in config pool router; do
  bin="$BUILD/tests/fuzz_${name}_replay"
  out=$("$bin" "$TOP/tests/fuzz/corpus/$name" 2>&1)
  status=$?
  n=$(printf '%s\n' "$out" | sed -n 's/.*: \([0-9]*\) inputs replayed.*/\1/p')
  [ "$status" -eq 0 ] && [ "${n:-0}" -gt 0 ]
  ok $? "fuzz_$name: the ${n:-0} committed inputs pass every check"
  [ "$status" -eq 0 ] || printf '%s\n' "$out" | tail -n 20 | sed 's/^/# /'
done
done_testing

#!/usr/bin/env bash
# Replays the committed fuzz corpora (tests/fuzz/corpus/NAME) through the fuzz targets built
# with the project's compiler and the current pass's sanitizers, so every `make test` pass
# checks that no input that once mattered breaks a check, with or without libFuzzer.
. "$TOP/tests/tap.sh"

# replay NAME [VAR=VALUE]: the committed inputs of fuzz_NAME, with the settings given.
replay() {
  local name=$1 setting=${2:-} bin="$BUILD/tests/fuzz_${1}_replay" out status n
  # shellcheck disable=SC2086
  out=$(env $setting "$bin" "$TOP/tests/fuzz/corpus/$name" 2>&1)
  status=$?
  n=$(printf '%s\n' "$out" | sed -n 's/.*: \([0-9]*\) inputs replayed.*/\1/p')
  [ "$status" -eq 0 ] && [ "${n:-0}" -gt 0 ]
  ok $? "fuzz_$name${setting:+ ($setting)}: the ${n:-0} committed inputs pass every check"
  [ "$status" -eq 0 ] || printf '%s\n' "$out" | grep -v '^ \|^Bin\|^Stats' | tail -n 20 |
    sed 's/^/# /'
}
for name in config pool router; do
  replay $name
done
# The cap target reaches the shim: the pool on (VMM-backed over the fake), regions, then off
# (settings are fixed per process), each with its default spill budget and GPUCAP_SPILL; then
# the pool on without them.
replay cap GPUCAP_POOL=on
replay cap GPUCAP_POOL=regions
replay cap GPUCAP_POOL=off
replay cap "GPUCAP_POOL=on GPUCAP_OVERSUBSCRIBE= GPUCAP_SPILL="
done_testing

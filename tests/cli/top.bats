#!/usr/bin/env bats
# gpucap top: the shared budgets of this user, from their ledgers alone: a table, snapshots
# when stdout is not a terminal, --once --json for scripts; usage errors; a bad ledger named.

load helpers

budget() {
  printf 'cli-top-%s-%s' "$$" "$BATS_TEST_NUMBER"
}

teardown() {
  rm -f "/dev/shm/gpucap-budget.$(id -u).$(budget)"*
  cd / && rm -rf "$SCRATCH"
}

@test "--help describes the command; bad arguments are usage errors (2)" {
  run "$GPUCAP" top --help
  status_is 0
  [[ "$output" == *"Usage: gpucap top"* ]]
  run "$GPUCAP" top --bogus
  status_is 2
  [[ "$output" == *"gpucap: error: top: unknown argument '--bogus'"* ]]
  run "$GPUCAP" top --interval 0
  status_is 2
  [[ "$output" == *"--interval '0'"* ]]
  run "$GPUCAP" top -n x
  status_is 2
  run "$GPUCAP" top --budget 'a/b'
  status_is 2
  [[ "$output" == *"--budget 'a/b': invalid byte"* ]]
}

@test "a budget after a run that filled it: its cap and peak, no process left, as JSON and as a table" {
  b=$(budget)
  run grun --quiet --share "$b" --limit 1GiB "$WORKLOAD"
  status_is 0
  run --separate-stderr "$GPUCAP" top --once --json --budget "$b"
  status_is 0
  [ -z "$stderr" ]
  python3 -c 'import json, sys; d = json.loads(sys.argv[1]); b = d["budgets"][0]; v = b["devices"][0]
assert d["version"] == 2 and b["name"] == sys.argv[2], d
assert v["cap"] == 1 << 30 and v["peak"] == 1 << 30 and v["refused"] == 0, v
assert v["used"] == 0 and v["processes"] == [] and v["uuid"].startswith("GPU-"), v' "$output" "$b"
  run "$GPUCAP" top --once --budget "$b"
  status_is 0
  [[ "${lines[0]}" == BUDGET*DEVICE*PID*"IN USE"*"POOL IDLE"*DRIVER*WHOLE*CAP*PEAK*OOMS ]]
  [[ "${lines[1]}" == "$b "*" all "*"1.00GiB"* ]]
}

@test "without a terminal: a snapshot per interval, -n of them" {
  run "$GPUCAP" top -n 3 --interval 0.01 --budget "$(budget)"
  status_is 0
  [ "$(grep -c '^BUDGET' <<<"$output")" -eq 3 ]
  [[ "$output" != *$'\033'* ]]
}

@test "no budget: an empty list, valid JSON" {
  run "$GPUCAP" top --once --json --budget "$(budget)"
  status_is 0
  [ "$output" = '{"version": 2, "budgets": []}' ]
}

@test "a ledger that is not one is named in a warning and skipped" {
  f="/dev/shm/gpucap-budget.$(id -u).$(budget)"
  printf 'junk' >"$f"
  chmod 600 "$f"
  run --separate-stderr "$GPUCAP" top --once --json --budget "$(budget)"
  status_is 0
  [ "$output" = '{"version": 2, "budgets": []}' ]
  [[ "$stderr" == *"gpucap: warning: budget ledger $f: not the size of a ledger"* ]]
}

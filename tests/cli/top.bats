#!/usr/bin/env bats
# gpucap top: the processes of this user running with gpucap and its shared budgets, from their
# files alone: a table, snapshots when stdout is not a terminal, --once --json for scripts;
# entries gone at exit and before an exec, left by SIGKILL and removed by --clean (always with
# --budget here: other test runs on the machine own the rest); usage errors; a bad budget file named.

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
  [[ "${lines[1]}" == "$b "*" all "*"1.0 GiB"* ]]
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
  [ "$output" = '{"version": 2, "processes": [], "budgets": []}' ]
}

@test "a budget file that is not one is named in a warning and skipped" {
  f="/dev/shm/gpucap-budget.$(id -u).$(budget)"
  printf 'junk' >"$f"
  chmod 600 "$f"
  run --separate-stderr "$GPUCAP" top --once --json --budget "$(budget)"
  status_is 0
  [ "$output" = '{"version": 2, "processes": [], "budgets": []}' ]
  [[ "$stderr" == *"gpucap: warning: budget file $f: not the size of a budget file"* ]]
}

# ---- Every process running with gpucap, shared budget or not ----

PROBE="$BUILD/tests/fakecuda_probe"

# started CMD...: CMD (gpucap run ...) in the background, its output in out.txt, its pid in $pid
# (gpucap run execs: the pid is the program's); waits until it has allocated. out.txt goes first:
# the background shell truncates it only when it runs, and an earlier run's "alloc" must not count.
started() {
  rm -f out.txt
  LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$(preload_env)" ASAN_OPTIONS=detect_leaks=0 \
    "$GPUCAP" run --quiet "$@" >out.txt 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q '^alloc' out.txt 2>/dev/null && break; sleep 0.05; done
}

# entry PID: the process's roster file.
entry() {
  printf '/dev/shm/gpucap-proc.%s.%s' "$(id -u)" "$1"
}

@test "a process run with --limit is listed with its cap and pool while it runs, and only then" {
  started --limit 1GiB -- "$PROBE" init ctx alloc:$((64 << 20)) "wait:$SCRATCH/go"
  [ -e "$(entry "$pid")" ]
  run --separate-stderr "$GPUCAP" top --once --json
  status_is 0
  python3 -c 'import json, sys; d = json.loads(sys.argv[1]); pid = int(sys.argv[2])
p = [p for p in d["processes"] if p["pid"] == pid]
assert len(p) == 1, d["processes"]
p = p[0]
assert p["share"] == "" and "fakecuda_probe init ctx" in p["command"], p
v = p["devices"][0]
assert v["device"] == 0 and v["cap"] == 1 << 30 and v["pool"] >= 64 << 20, v
assert v["peak"] >= v["pool"] and v["refused"] == 0, v' "$output" "$pid"
  run "$GPUCAP" top --once
  status_is 0
  [[ "${lines[0]}" == *PID*COMMAND*DEVICE*CAP*POOL*PEAK*OOMS*BUDGET ]]
  line=$(grep -m 1 "^ *$pid " <<<"$output")
  [[ "$line" == *" 0 "*"1.0 GiB"*" 0  -" ]]
  touch "$SCRATCH/go"
  wait "$pid"
  [ ! -e "$(entry "$pid")" ]
  run "$GPUCAP" top --once --json
  [[ "$output" != *"\"pid\": $pid,"* ]]
}

@test "a process of a shared budget is listed with its budget; an uncapped one with cap none" {
  b=$(budget)
  started --share "$b" --limit 1GiB -- "$PROBE" init ctx alloc:$((8 << 20)) "wait:$SCRATCH/go"
  run "$GPUCAP" top --once
  line=$(grep -m 1 "^ *$pid " <<<"$output")
  [[ "$line" == *"1.0 GiB"*"  $b" ]]
  touch "$SCRATCH/go"
  wait "$pid"
  rm -f "$SCRATCH/go"
  started -- "$PROBE" init ctx alloc:$((8 << 20)) "wait:$SCRATCH/go"
  run "$GPUCAP" top --once
  line=$(grep -m 1 "^ *$pid " <<<"$output")
  [[ "$line" == *" 0       none "* ]]
  touch "$SCRATCH/go"
  wait "$pid"
}

@test "exec: the entry goes before the new program starts, which makes its own if it uses CUDA" {
  started --limit 1GiB -- "$PROBE" init ctx alloc:$((8 << 20)) "wait:$SCRATCH/go" \
    "exec:/bin/sh" -c 'echo "after $$: $(ls /dev/shm/gpucap-proc.$(id -u).$$ 2>&1)"'
  [ -e "$(entry "$pid")" ]
  touch "$SCRATCH/go"
  wait "$pid"
  grep -q "^after $pid: ls: cannot access" out.txt
}

@test "SIGKILL leaves an entry no one lists; --clean removes it and the budget nobody runs" {
  b=$(budget)
  started --share "$b" --limit 1GiB -- "$PROBE" init ctx alloc:$((8 << 20)) "wait:$SCRATCH/go"
  kill -9 "$pid"
  wait "$pid" || true
  run "$GPUCAP" top --once --json
  [[ "$output" != *"\"pid\": $pid,"* ]]
  run --separate-stderr "$GPUCAP" top --clean --budget "$b"
  status_is 0
  [ -z "$stderr" ]
  # The entry is removed here, unless another process of this user that started meanwhile (a
  # test running beside this one) reclaimed it first (the next test).
  for l in "${lines[@]}"; do
    [[ "$l" != "removed $(entry "$pid"):"* ]] ||
      [[ "$l" == "removed $(entry "$pid"): process $pid ($PROBE init ctx"*") is gone" ]] # cut at 95 bytes
  done
  has "removed /dev/shm/gpucap-budget.$(id -u).$b: budget '$b' has no live process"
  [ ! -e "$(entry "$pid")" ] && [ ! -e "/dev/shm/gpucap-budget.$(id -u).$b" ]
  run "$GPUCAP" top --clean --budget "$b"
  [ "$output" = "nothing to remove: every entry and budget belongs to a live process" ]
}

@test "SIGKILL: the next process of the user that uses a device reclaims the dead one's entry" {
  started --limit 1GiB -- "$PROBE" init ctx alloc:$((8 << 20)) "wait:$SCRATCH/go"
  dead=$pid
  kill -9 "$dead"
  wait "$dead" || true
  started --limit 1GiB -- "$PROBE" init ctx alloc:$((8 << 20)) "wait:$SCRATCH/go"
  [ -e "$(entry "$pid")" ]
  [ ! -e "$(entry "$dead")" ]
  touch "$SCRATCH/go"
  wait "$pid"
}

@test "--clean keeps a budget a process still runs in, and takes no display option" {
  b=$(budget)
  started --share "$b" --limit 1GiB -- "$PROBE" init ctx alloc:$((8 << 20)) "wait:$SCRATCH/go"
  run "$GPUCAP" top --clean --budget "$b"
  status_is 0
  [ "$output" = "nothing to remove: every entry and budget belongs to a live process" ]
  [ -e "/dev/shm/gpucap-budget.$(id -u).$b" ] && [ -e "$(entry "$pid")" ]
  touch "$SCRATCH/go"
  wait "$pid"
  run --separate-stderr "$GPUCAP" top --clean --json
  status_is 2
  err_has "top: --clean takes no other option but --budget"
}

#!/bin/sh
# make fuzz: runs each libFuzzer target named on the command line for FUZZ_SECONDS over a
# scratch corpus seeded from the committed one (tests/fuzz/corpus/NAME, never written here),
# with its dictionary, then prints one line of figures per target and writes them to
# $FUZZ_BUILD/summary.txt. Exits 1 if any target found a failing input (kept as
# $FUZZ_BUILD/crash-NAME-*) or could not run.
set -u
: "${FUZZ_BUILD:=build/fuzz}" "${FUZZ_SECONDS:=60}"
summary="$FUZZ_BUILD/summary.txt"
: > "$summary"
status=0
for name in "$@"; do
  bin="$FUZZ_BUILD/fuzz_$name"
  scratch="$FUZZ_BUILD/corpus/$name"
  log="$FUZZ_BUILD/fuzz-$name.log"
  mkdir -p "$scratch"
  dict=""
  [ -f "tests/fuzz/$name.dict" ] && dict="-dict=tests/fuzz/$name.dict"
  # The pool and cap targets check every invariant after each operation: short inputs run
  # faster.
  max_len=4096
  case $name in pool | cap) max_len=1024 ;; esac
  echo "fuzz_$name: ${FUZZ_SECONDS}s ..."
  # shellcheck disable=SC2086
  "$bin" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
    -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD/crash-$name-" $dict \
    "$scratch" "tests/fuzz/corpus/$name" > "$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | sed 's/cov: //')
  units=$(ls "$scratch" "tests/fuzz/corpus/$name" 2>/dev/null | grep -vc ':$')
  line="fuzz_$name: ${runs:-0} inputs in ${secs:-?} s, coverage ${cov:-?} edges,"
  line="$line corpus $units, exit $rc"
  echo "$line" | tee -a "$summary"
  if [ "$rc" -ne 0 ] || [ -z "$runs" ]; then
    echo "fuzz_$name: FAILED; last lines of $log:" >&2
    tail -n 30 "$log" >&2
    status=1
  fi
done
exit $status

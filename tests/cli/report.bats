#!/usr/bin/env bats
# gpucap report FILE.json: the saved JSON exit report printed as the very table the library
# printed at exit, and every way the input can be wrong.

load helpers

@test "the table from the JSON is the table the run printed" {
  grun_leaks --limit 2GiB --json ./run.json --report ./table.txt -- "$WORKLOAD" >/dev/null 2>&1
  run --separate-stderr "$GPUCAP" report ./run.json
  status_is 0
  [ -z "$stderr" ]
  [ "$output" = "$(cat table.txt)" ]
  has "gpucap: memory report (pid "
}

@test "pass-through and uncapped pools read back the same too" {
  GPUCAP_POOL=off grun_leaks --json ./off.json --report ./off.txt -- "$WORKLOAD" >/dev/null 2>&1
  run "$GPUCAP" report off.json
  status_is 0
  [ "$output" = "$(cat off.txt)" ]
  has "none"
}

@test "standard input with -" {
  grun_leaks --limit 1GiB --json ./run.json --quiet -- "$WORKLOAD" >/dev/null 2>&1
  run "$GPUCAP" report - <run.json
  status_is 0
  has "1.0 GiB"
  run "$GPUCAP" report -- run.json
  status_is 0
  has "1.0 GiB"
}

@test "a report with no devices" {
  printf '{"gpucap_version": "0.1.0", "pid": null, "devices": []}' >empty.json
  run "$GPUCAP" report empty.json
  status_is 0
  [ "$output" = "gpucap: memory report
  no device memory was allocated" ]
}

@test "a missing file: exit 1, named" {
  run --separate-stderr "$GPUCAP" report ./nonexistent.json
  status_is 1
  err_has "gpucap: error: report: cannot open './nonexistent.json': No such file or directory"
}

@test "a directory: exit 1" {
  run --separate-stderr "$GPUCAP" report .
  status_is 1
  err_has "cannot read '.'"
}

@test "not JSON: exit 1, with line and column" {
  printf '{\n  "pid": 1,\n  oops\n}\n' >bad.json
  run --separate-stderr "$GPUCAP" report bad.json
  status_is 1
  err_has "gpucap: error: report: bad.json: line 3, column 3: expected a key in double quotes"
  err_has "JSON exit report as written by GPUCAP_REPORT_JSON"
}

@test "JSON that is not a report: exit 1, naming what is missing" {
  printf '{"gpucap_version": "0.1.0", "pid": 5, "devices": [{"device": 0}]}' >partial.json
  run --separate-stderr "$GPUCAP" report partial.json
  status_is 1
  err_has "devices[0] has no \"context\""
  printf '[1, 2]' >array.json
  run --separate-stderr "$GPUCAP" report array.json
  status_is 1
  err_has "the document is not a JSON object; is it a gpucap JSON report?"
}

@test "200 000 keys in one object: the duplicate at the end is found at once" {
  # A quadratic check took hours on a report at the 64 MiB size limit; the timeout only
  # catches a hang, it is no measure.
  awk 'BEGIN { printf "{\"gpucap_version\": \"0.1.0\", \"pid\": 1, \"devices\": [], \"big\": {";
               for (i = 0; i < 200000; i++) printf "\"k%d\": %d, ", i, i;
               printf "\"k7\": 0}}\n" }' >keys.json
  run --separate-stderr timeout 60 "$GPUCAP" report keys.json
  status_is 1
  err_has "column 3577846: the key \"k7\" appears twice in one object"
  sed 's/"k7": 0}}/"last": 0}}/' keys.json >unique.json
  run --separate-stderr timeout 60 "$GPUCAP" report unique.json
  status_is 0
  has "no device memory was allocated"
}

@test "reports of older versions and of a run ended by a signal read back" {
  printf '{"gpucap_version": "0.1.0", "pid": 7, "devices": []}' >old.json
  run "$GPUCAP" report old.json
  status_is 0
  has "gpucap: memory report (pid 7)"
  printf '{"gpucap_version": "0.2.0", "pid": 7, "ended_by": "SIGTERM", "complete": false, "notes": ["GPUCAP_TRACE: its last 3 events were not written"], "devices": []}' >new.json
  run "$GPUCAP" report new.json
  status_is 0
  has "gpucap: memory report (pid 7, ended by SIGTERM)"
  has "  note: GPUCAP_TRACE: its last 3 events were not written"
}

@test "a trace given by mistake is refused" {
  grun_leaks --limit 1GiB --trace ./t.csv --quiet -- "$WORKLOAD" >/dev/null 2>&1
  run --separate-stderr "$GPUCAP" report t.csv
  status_is 1
  err_has "line 1, column 1: expected a JSON value"
}

@test "usage errors: no file, two files, unknown option" {
  run --separate-stderr "$GPUCAP" report
  status_is 2
  err_has "report: no file given; usage: gpucap report FILE.json"
  run --separate-stderr "$GPUCAP" report a.json b.json
  status_is 2
  err_has "report: one FILE.json at a time"
  run --separate-stderr "$GPUCAP" report --json x
  status_is 2
  err_has "report: unknown option '--json'"
}

@test "--help and --version" {
  run "$GPUCAP" report --help
  status_is 0
  has "Usage: gpucap report FILE.json"
  run "$GPUCAP" report -h
  status_is 0
  run "$GPUCAP" report --version
  status_is 0
  [[ "$output" =~ ^gpucap\ [0-9.]+$ ]]
}

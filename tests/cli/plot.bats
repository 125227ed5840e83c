#!/usr/bin/env bats
# gpucap plot TRACE.csv -o OUT.svg: the timeline of a real capped run, with the cap and pool
# from --cap or --json; a picture a renderer accepts, and one headless Chromium draws as it
# should (its screenshot probed box by box); every input and usage error.

load helpers

capped_run() { # the region pool: two regions of 1 GiB, whose rows the tests count
  GPUCAP_POOL=regions grun_leaks --limit 2GiB --json ./run.json --trace ./trace.csv --quiet -- "$WORKLOAD" \
    >/dev/null 2>&1
}

# svg_ok FILE: a renderer accepts it, when one is installed (rsvg-convert or xmllint).
svg_ok() {
  if command -v rsvg-convert >/dev/null; then
    rsvg-convert "$1" -o "$1.png" && [ -s "$1.png" ]
  elif command -v xmllint >/dev/null; then
    xmllint --noout "$1"
  fi
}

@test "a capped run's trace and report make a timeline: pool, in use, requested and the cap" {
  capped_run
  run --separate-stderr "$GPUCAP" plot trace.csv --json run.json -o timeline.svg
  status_is 0
  [ -z "$output" ] && [ -z "$stderr" ]
  [ "$(head -c 5 timeline.svg)" = "<?xml" ]
  grep -q '<svg xmlns="http://www.w3.org/2000/svg"' timeline.svg
  grep -q '3 allocations, 3 frees, 1 refused' timeline.svg
  grep -q '>cap</tspan><tspan[^>]*>2.0 GiB<' timeline.svg
  # The pool grew by two 1 GiB regions; its blocks held 1.5 GiB at most.
  grep -q '>device 0<' timeline.svg
  grep -q 'peak pool 2.0 GiB · peak in use 1.5 GiB · peak requested 1.5 GiB' timeline.svg
  grep -q '>pool (from the driver)<' timeline.svg
  grep -q '>in use by blocks<' timeline.svg
  grep -q '>peak in use 1.5 GiB<' timeline.svg
  ! grep -q '>peak pool<' timeline.svg || false
  grep -q '>+1.0 GiB cap_full</text>' timeline.svg
  ! grep -q -e '<script' -e 'href' -e 'url(' timeline.svg || false
  svg_ok timeline.svg
}

@test "without a report, the trace gives the cap: never 'cap none' for a capped run" {
  capped_run
  grep -q ',allocate failure,0x0,2147483648,0x0,0,cap,0,,,0$' trace.csv
  run --separate-stderr "$GPUCAP" plot trace.csv -o t.svg
  status_is 0
  [ -z "$stderr" ]
  grep -q '1 refused · cap 2.0 GiB</text>' t.svg
  grep -q '>cap</tspan><tspan[^>]*>2.0 GiB<' t.svg
  # An uncapped run's trace says so; a trace without cap rows (an RMM trace, an older gpucap)
  # says it does not know.
  grun_leaks --trace ./free.csv --quiet -- "$WORKLOAD" >/dev/null 2>&1
  grep -q ',allocate failure,0x0,18446744073709551615,0x0,0,cap,0,,,0$' free.csv
  "$GPUCAP" plot free.csv -o free.svg
  grep -q 'cap none</text>' free.svg
  grep -v ',cap,' trace.csv >old.csv
  "$GPUCAP" plot old.csv -o old.svg
  grep -q 'cap unknown</text>' old.svg
  ! grep -q '>cap</tspan>' old.svg || false
}

@test "--cap SIZE draws the cap without a report; --title sets the title" {
  capped_run
  run "$GPUCAP" plot trace.csv --cap 1.5GiB --title 'My <run>' -o t.svg
  status_is 0
  grep -q '>1.5 GiB</tspan>' t.svg
  grep -q 'My &lt;run&gt;' t.svg
  ! grep -q '>peak pool<' t.svg || false
  svg_ok t.svg
}

@test "--cap wins over the report's cap; options in any order, with =" {
  capped_run
  run "$GPUCAP" plot --output=t.svg --json=run.json --cap=3GiB trace.csv
  status_is 0
  grep -q '>3.0 GiB</tspan>' t.svg
  ! grep -q '>2.0 GiB</tspan>' t.svg || false
}

@test "-o - writes the picture to standard output; - reads the trace from standard input" {
  capped_run
  run "$GPUCAP" plot -o - - <trace.csv
  status_is 0
  [[ "$output" == "<?xml"*"</svg>" ]]
}

@test "two devices: one panel each, each with its own cap from the report" {
  capped_run
  obj=$(sed -n '/^    {$/,/^    }$/p' run.json)
  { echo '{"gpucap_version": "0.1.0", "pid": 1, "devices": ['; echo "$obj,"
    sed -e 's/"device": 0/"device": 1/' -e 's/"cap_bytes": [0-9]*/"cap_bytes": 3221225472/' \
      <<<"$obj"; echo ']}'; } >two.json
  run "$GPUCAP" report two.json
  status_is 0
  # The same run again on device 1, after it (the reader moves its earlier times up).
  { cat trace.csv; sed -e 1d -e 's/,0,\([a-z]*\),/,1,\1,/' trace.csv; } >both.csv
  run --separate-stderr "$GPUCAP" plot both.csv --json two.json -o t.svg
  status_is 0
  [ -z "$stderr" ]
  grep -q '>device 0<' t.svg
  grep -q '>device 1<' t.svg
  grep -q '6 allocations, 6 frees, 2 refused' t.svg
  grep -q '>cap</tspan><tspan[^>]*>2.0 GiB<' t.svg
  grep -q '>cap</tspan><tspan[^>]*>3.0 GiB<' t.svg
  svg_ok t.svg
}

@test "an RMM trace (no Device column) and a report with several devices: no pool line, a warning" {
  capped_run
  obj=$(sed -n '/^    {$/,/^    }$/p' run.json)
  { echo '{"gpucap_version": "0.1.0", "pid": 1, "devices": ['; echo "$obj,"
    sed 's/"device": 0/"device": 1/' <<<"$obj"; echo ']}'; } >two.json
  grep -v -e ',reserve,' -e ',release,' trace.csv | cut -d, -f1-6 >rmm.csv
  run --separate-stderr "$GPUCAP" plot rmm.csv --json two.json -o t.svg
  status_is 0
  err_has "gpucap: warning: plot: two.json reports several devices but the trace does not say"
  ! grep -q '>peak pool<' t.svg || false
  grep -q '>all devices<' t.svg
  grep -q 'peak requested 1.5 GiB' t.svg
}

@test "an RMM trace and a one-device report: the pool's peak size is drawn" {
  capped_run
  grep -v -e ',reserve,' -e ',release,' trace.csv | cut -d, -f1-6 >rmm.csv
  run --separate-stderr "$GPUCAP" plot rmm.csv --json run.json -o t.svg
  status_is 0
  [ -z "$stderr" ]
  grep -q '>peak pool</tspan>' t.svg
  grep -q '>cap</tspan><tspan[^>]*>2.0 GiB<' t.svg
  # Without a pool there is no pool line, and no warning about devices: the report has one.
  GPUCAP_POOL=off grun_leaks --limit 2GiB --json ./off.json --trace ./off.csv --quiet -- \
    "$WORKLOAD" >/dev/null 2>&1
  cut -d, -f1-6 off.csv >rmm-off.csv
  run --separate-stderr "$GPUCAP" plot rmm-off.csv --json off.json -o t.svg
  status_is 0
  [ -z "$stderr" ]
  ! grep -q '>peak pool<' t.svg || false
  grep -q '>cap</tspan><tspan[^>]*>2.0 GiB<' t.svg
}

@test "a trace cut mid-line (a full disk, a killed run): drawn without its last line, a warning" {
  capped_run
  head -c -10 trace.csv >cut.csv
  run --separate-stderr "$GPUCAP" plot cut.csv -o t.svg
  status_is 0
  err_has "gpucap: warning: plot: cut.csv: line 11 ends without a newline (the trace was cut"
  grep -q '3 allocations, 2 frees, 1 refused' t.svg
  svg_ok t.svg
}

@test "a trace with only a header: exit 1" {
  echo 'Thread,Time,Action,Pointer,Size,Stream' >empty.csv
  run --separate-stderr "$GPUCAP" plot empty.csv -o t.svg
  status_is 1
  err_has "plot: empty.csv has no events"
  [ ! -e t.svg ]
}

@test "a file that is not a trace: exit 1, with the line" {
  printf 'Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00.0,allocate,0x10,256,0x0\n1,oops\n' \
    >bad.csv
  run --separate-stderr "$GPUCAP" plot bad.csv -o t.svg
  status_is 1
  err_has "gpucap: error: plot: bad.csv: line 3: expected 6 comma-separated fields"
  printf '{}' >notcsv.csv
  run --separate-stderr "$GPUCAP" plot notcsv.csv -o t.svg
  status_is 1
  err_has "line 1: not an RMM trace"
}

@test "missing inputs and unwritable outputs: exit 1" {
  capped_run
  run --separate-stderr "$GPUCAP" plot nonexistent.csv -o t.svg
  status_is 1
  err_has "plot: cannot open 'nonexistent.csv'"
  run --separate-stderr "$GPUCAP" plot trace.csv --json nonexistent.json -o t.svg
  status_is 1
  err_has "plot: cannot open 'nonexistent.json'"
  run --separate-stderr "$GPUCAP" plot trace.csv --json trace.csv -o t.svg
  status_is 1
  err_has "plot: trace.csv: line 1, column 1"
  run --separate-stderr "$GPUCAP" plot trace.csv -o ./no/such/dir/t.svg
  status_is 1
  err_has "plot: cannot create './no/such/dir/t.svg'"
}

@test "a bad --cap: the settings parser's message, exit 2" {
  capped_run
  run --separate-stderr "$GPUCAP" plot trace.csv --cap 2GB -o t.svg
  status_is 2
  err_has "plot: --cap '2GB': 'GB' is ambiguous"
  [ ! -e t.svg ]
}

@test "usage errors: no trace, no -o, two traces, unknown or repeated options" {
  run --separate-stderr "$GPUCAP" plot -o t.svg
  status_is 2
  err_has "plot: no trace given"
  run --separate-stderr "$GPUCAP" plot trace.csv
  status_is 2
  err_has "plot: no output given; add -o OUT.svg"
  run --separate-stderr "$GPUCAP" plot a.csv b.csv -o t.svg
  status_is 2
  err_has "plot: one TRACE.csv at a time"
  run --separate-stderr "$GPUCAP" plot a.csv --colour red -o t.svg
  status_is 2
  err_has "plot: unknown option '--colour'"
  run --separate-stderr "$GPUCAP" plot a.csv -o x.svg -o y.svg
  status_is 2
  err_has "plot: -o is given twice"
  run --separate-stderr "$GPUCAP" plot a.csv -o
  status_is 2
  err_has "-o needs a value"
}

@test "--help and --version" {
  run "$GPUCAP" plot --help
  status_is 0
  has "Usage: gpucap plot TRACE.csv -o OUT.svg [--cap SIZE] [--json REPORT.json] [--title TEXT]"
  has "one panel"
  run "$GPUCAP" plot --version
  status_is 0
  [[ "$output" =~ ^gpucap\ [0-9.]+$ ]]
}

# screenshot SVG PNG WIDTH HEIGHT: the picture as headless Chromium (Debian's chromium package)
# draws it.
screenshot() {
  timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --force-device-scale-factor=1 --user-data-dir="$SCRATCH/chromium" \
    --window-size="$3,$4" --screenshot="$SCRATCH/$2" "file://$SCRATCH/$1" >/dev/null 2>&1
}

@test "in a browser: each device's panel shows its pool over in use, and the cap" {
  command -v chromium >/dev/null || skip "chromium is not installed (apt-get install chromium)"
  command -v python3 >/dev/null || skip "python3 is not installed"
  # Device 0: a 2 GiB region holding a 1 GiB block; device 1: a 512 MiB block the driver
  # allocated itself; both for one second, under a 3 GiB cap.
  cat >two.csv <<'CSV'
Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held
1,10:00:00.000000,allocate failure,0x7f0000000000,2147483648,0x0,0,reserve,2147483648
1,10:00:00.000000,allocate,0x7f0000000000,1073741824,0x0,0,alloc,1073741824
1,10:00:00.000000,allocate,0x7e0000000000,536870912,0x0,1,alloc,536870912
1,10:00:01.000000,free,0x7f0000000000,1073741824,0x0,0,free,1073741824
1,10:00:01.000000,allocate failure,0x7f0000000000,2147483648,0x0,0,release,2147483648
1,10:00:01.000000,free,0x7e0000000000,536870912,0x0,1,free,536870912
CSV
  run "$GPUCAP" plot two.csv --cap 3GiB -o two.svg
  status_is 0
  grep -q 'width="960" height="734"' two.svg
  screenshot two.svg two.png 960 734
  [ -s two.png ]
  # Each panel's plot area spans y = top + 34 .. top + 260 (panels at 100 and 400) for bytes
  # 0 .. 3.5 GiB, and x = 96 .. 848 for 0 .. 1 s; the boxes sit at 0.48 s, between grid lines.
  run python3 "$TOP/tests/cli/png_probe.py" two.png \
    455 305 12 12 455 240 12 12 455 205 12 12 455 166 44 1 \
    455 640 12 12 455 605 12 12 455 466 44 1
  status_is 0
  # device 0: held (0-1 GiB), reserved above it (1-2 GiB), nothing above 2 GiB, the cap's
  # dashes (7 on, 4 off) at 3 GiB; device 1: held (0-0.5 GiB), nothing above, its cap line.
  # Each box: its colour, and the least share of its pixels that must have it.
  expected="#c6daf2 95
#fbe6c6 95
#ffffff 95
#c0392b 50
#c6daf2 95
#ffffff 95
#c0392b 50"
  paste -d' ' <(printf '%s\n' "$output") <(printf '%s\n' "$expected") >boxes.txt
  cat boxes.txt
  [ "$(wc -l <boxes.txt)" -eq 7 ]
  awk '$1 != $3 || $2 < $4 { bad = 1 } END { exit bad }' boxes.txt
}

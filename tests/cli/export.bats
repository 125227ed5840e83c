#!/usr/bin/env bats
# gpucap export --format torch-snapshot|perfetto TRACE.csv -o OUT: the exports of real runs
# (pooled and pass-through, 8 threads, a second device) agree with the trace, as an independent
# replay in Python sees it (export_check.py), and PyTorch's own viewer code reads the snapshot
# when the frameworks' environment (make frameworks) has PyTorch; every usage error.

load helpers

CHECK="$TOP/tests/cli/export_check.py"

# The Python with PyTorch when make frameworks installed it (TORCH_PY), else the system's.
setup_file() {
  TORCH_PY=
  if [ -x "${FRAMEWORKS_VENV:-/nonexistent}/bin/python" ] &&
    "$FRAMEWORKS_VENV/bin/python" -c 'import torch.cuda._memory_viz' 2>/dev/null; then
    TORCH_PY="$FRAMEWORKS_VENV/bin/python"
  fi
  export TORCH_PY
}

py() {
  "${TORCH_PY:-python3}" "$@"
}

# check_both TRACE: both exports of TRACE, each checked against it.
check_both() {
  run --separate-stderr "$GPUCAP" export --format torch-snapshot "$1" -o "$1.pickle"
  status_is 0
  [ -z "$output" ] && [ -z "$stderr" ]
  run py "$CHECK" torch "$1" "$1.pickle"
  printf '%s\n' "$output"
  status_is 0
  run --separate-stderr "$GPUCAP" export --format perfetto "$1" -o "$1.json"
  status_is 0
  run python3 "$CHECK" perfetto "$1" "$1.json"
  printf '%s\n' "$output"
  status_is 0
}

@test "a capped run with a refusal: both exports agree with its trace" {
  command -v python3 >/dev/null || skip "python3 is not installed"
  grun_leaks --limit 2GiB --trace ./trace.csv --quiet -- "$WORKLOAD" >/dev/null 2>&1
  check_both trace.csv
  grep -q '"name":"refused"' trace.csv.json
  # Each entry's frame names the library that asked (the trace's Library column: the program),
  # a region's only its thread.
  run python3 -c 'import pickle, sys
for e in pickle.load(open(sys.argv[1], "rb"))["device_traces"][0]:
    print(e["action"], e["frames"][0]["name"].split(" (")[0] if "(" in e["frames"][0]["name"] else "-")' \
    trace.csv.pickle
  [ "$(printf '%s\n' "$output" | sort -u | tr '\n' ';')" = \
    "alloc workload;free_completed workload;free_requested workload;oom workload;segment_alloc -;" ]
}

@test "8 threads, pooled (both backings) and pass-through: both exports agree with their traces" {
  command -v python3 >/dev/null || skip "python3 is not installed"
  for pool in vmm regions off; do
    GPUCAP_POOL=$pool grun_leaks --limit 64MiB --trace "./t-$pool.csv" --quiet -- \
      "$BUILD/tests/threads" 8 400 $([ $pool = vmm ] && echo noipc) >/dev/null 2>&1
    check_both "t-$pool.csv"
  done
}

@test "a run on device 1: its entries are device 1's" {
  command -v python3 >/dev/null || skip "python3 is not installed"
  FAKECUDA_DEVICES=2 grun_leaks --limit 256MiB --trace ./d1.csv --quiet -- \
    "$BUILD/tests/captest" 1 $((48 << 20)) >/dev/null 2>&1
  grep -q ',1,alloc,' d1.csv
  ! grep -q ',0,alloc,' d1.csv || false
  check_both d1.csv
  run py -c 'import pickle,sys; t = pickle.load(open(sys.argv[1], "rb"))["device_traces"]
print(len(t), len(t[0]), len(t[1]) > 0)' d1.csv.pickle
  [ "$output" = "2 0 True" ]
}

@test "PyTorch's viewer draws the snapshot (when the frameworks' PyTorch is installed)" {
  [ -n "$TORCH_PY" ] || skip "PyTorch is not installed (make frameworks)"
  # The region pool: its two regions are the snapshot's two segments.
  GPUCAP_POOL=regions grun_leaks --limit 2GiB --trace ./trace.csv --quiet -- "$WORKLOAD" \
    >/dev/null 2>&1
  "$GPUCAP" export --format torch-snapshot trace.csv -o snap.pickle
  run "$TORCH_PY" -m torch.cuda._memory_viz trace_plot snap.pickle -o plot.html
  status_is 0
  grep -q 'snapshot.pickle' plot.html
  run "$TORCH_PY" -m torch.cuda._memory_viz stats snap.pickle
  status_is 0
  has "segments: 2"
  has "total_reserved: 2.0GiB"
  has "total_allocated: 0.0B"
}

# viewer_setup: skips unless PyTorch (TORCH_PY), Debian's chromium, d3 5 (Debian's node-d3, whose
# bundle holds every d3 module PyTorch's viewer imports) and PyTorch's viewer script are here; sets
# D3_JS and MEMORYVIZ_JS. The viewer script (torch/utils/viz/MemoryViz.js) is not in the torch
# wheel: the page PyTorch writes imports it from a CDN, which the tests cannot reach. It is taken
# from $MEMORYVIZ_JS, else from the torch package (should a wheel ship it), else from
# MemoryViz.js beside the frameworks' environment.
viewer_setup() {
  [ -n "$TORCH_PY" ] || skip "PyTorch is not installed (make frameworks)"
  command -v chromium >/dev/null || skip "chromium is not installed (apt-get install chromium)"
  D3_JS=/usr/share/nodejs/d3/dist/d3.min.js
  [ -f "$D3_JS" ] || skip "d3 is not installed (apt-get install node-d3)"
  head -c 200 "$D3_JS" | grep -q 'd3js.org v5\.' ||
    skip "$D3_JS is not d3 5, which the viewer imports"
  local torch_dir
  torch_dir=$("$TORCH_PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  local js
  for js in "${MEMORYVIZ_JS:-}" "$torch_dir/utils/viz/MemoryViz.js" \
    "$(dirname "$FRAMEWORKS_VENV")/MemoryViz.js"; do
    if [ -n "$js" ] && [ -f "$js" ]; then
      MEMORYVIZ_JS=$js
      return 0
    fi
  done
  local why="PyTorch's viewer script is not here: the torch wheel does not ship MemoryViz.js"
  why+=" and the page loads it from the web; put PyTorch's torch/utils/viz/MemoryViz.js at"
  skip "$why \$MEMORYVIZ_JS or $(dirname "$FRAMEWORKS_VENV")/MemoryViz.js"
}

# viewer_page KIND ACTION...: PyTorch's page of kind KIND (trace_plot, segment_plot) for
# snap.pickle, made to run offline (memviz_page.py, with ACTION), as headless Chromium leaves it:
# KIND.dom (the DOM after the scripts ran) and KIND.png (a 1024x768 screenshot).
viewer_page() {
  local kind=$1
  shift
  "$TORCH_PY" -m torch.cuda._memory_viz "$kind" snap.pickle -o "$kind.html" 2>/dev/null
  python3 "$TOP/tests/cli/memviz_page.py" "$kind.html" "$MEMORYVIZ_JS" "$D3_JS" \
    "$SCRATCH/$kind-offline.html" "$@"
  local flags=(--headless --no-sandbox --disable-gpu --allow-file-access-from-files
    --hide-scrollbars --force-device-scale-factor=1 --user-data-dir="$SCRATCH/chromium"
    --window-size=1024,768 --virtual-time-budget=5000)
  timeout 120 chromium "${flags[@]}" --dump-dom "file://$SCRATCH/$kind-offline.html" \
    >"$kind.dom" 2>/dev/null
  timeout 120 chromium "${flags[@]}" --screenshot="$SCRATCH/$kind.png" \
    "file://$SCRATCH/$kind-offline.html" >/dev/null 2>&1
  [ -s "$kind.png" ]
}

# boxes_are PNG X Y W H COLOUR ...: each box of the screenshot is wholly COLOUR ("tableau": one of
# the viewer's ten block colours).
boxes_are() {
  local png=$1 args=() want=()
  shift
  while [ $# -gt 0 ]; do
    args+=("$1" "$2" "$3" "$4")
    want+=("$5")
    shift 5
  done
  run python3 "$TOP/tests/cli/png_probe.py" "$png" "${args[@]}"
  status_is 0
  printf '%s\n' "$output"
  local tableau='#4e79a7 #f28e2c #e15759 #76b7b2 #59a14f #edc949 #af7aa1 #ff9da7 #9c755f #bab0ab'
  local i=0 colour share
  while read -r colour share; do
    [ "$share" -eq 100 ] || return 1
    if [ "${want[i]}" = tableau ]; then
      [[ " $tableau " == *" $colour "* ]] || return 1
    else
      [ "$colour" = "${want[i]}" ] || return 1
    fi
    i=$((i + 1))
  done <<<"$output"
  [ "$i" -eq "${#want[@]}" ]
}

@test "in a browser: PyTorch's own viewer draws the snapshot's allocations, segments and frames" {
  viewer_setup
  # The region pool: a 768 MiB region with a 768 MiB block, a 1.25 GiB one with 256 and 512 MiB
  # blocks, a refused 1 GiB, then the three frees.
  GPUCAP_POOL=regions grun_leaks --limit 2GiB --trace ./trace.csv --quiet -- "$WORKLOAD" \
    >/dev/null 2>&1
  "$GPUCAP" export --format torch-snapshot trace.csv -o snap.pickle
  # "Active Memory Timeline", the mouse over the first allocation: a polygon for each of the three
  # allocations in the viewer's colours, one for the (empty) summary of small ones and the
  # minimap's; the context pane names the block and its frame (the trace's line 3, the library
  # that asked: the program).
  viewer_page trace_plot --hover
  run sh -c "grep -o '<polygon [^>]*>' trace_plot.dom | sed 's/.* fill=\"\\(#[0-9a-f]*\\)\".*/\\1/'"
  [ "$(printf '%s' "$output" | tr '\n' ' ')" = '#4e79a7 #f28e2c #e15759 #4e79a7 #4e79a7' ]
  grep -q '<option>Active Memory Timeline</option>' trace_plot.dom
  grep -Eq '<pre>0 Addr: b[0-9a-f]+_0, Size: 768.0MiB \(805306368 bytes\) allocation$' \
    trace_plot.dom
  grep -Eq '^trace.csv:3:workload \(thread [0-9]+\)</pre>' trace_plot.dom
  # The plot (x = 77 .. 1016, y = 49 .. 441 for 0 .. 1.6 GiB, one column per event): the 768 MiB
  # block all along the bottom, the 256 MiB one above it from the second event, the 512 MiB one
  # above both from the third, white above the 256 MiB one before that; the minimap below.
  boxes_are trace_plot.png 120 300 100 100 '#4e79a7' 200 190 60 40 '#f28e2c' \
    320 70 100 80 '#e15759' 190 70 60 80 '#ffffff' 400 462 100 16 '#4e79a7'
  # "Allocator State History", the fifth event (the 512 MiB allocation) clicked: every event
  # listed, the segments (the pool's regions) drawn with their blocks as they were then, and the
  # stack pane shows the event and its frame (line 6).
  viewer_page segment_plot --select 4
  for e in 'segment_alloc  s[0-9a-f]+_0    768.0MiB' 'alloc          b[0-9a-f]+_0    768.0MiB' \
    'segment_alloc  s[0-9a-f]+_0    1.3GiB \(1342177280 bytes\)' \
    'alloc          b[0-9a-f]+_0    256.0MiB' 'alloc          b[0-9a-f]+_0    512.0MiB' \
    'OOM \(requested 1.0GiB \(1073741824 bytes\)' 'free           b[0-9a-f]+_0    256.0MiB'; do
    grep -Eq "<pre style=\"[^\"]*\">$e" segment_plot.dom
  done
  [ "$(grep -o '<pre style="[^"]*">free ' segment_plot.dom | wc -l)" -eq 3 ]
  grep -q '(1.5GiB (1610612736 bytes) allocated / 2.0GiB (2147483648 bytes) reserved)' \
    segment_plot.dom
  grep -Eq '^trace.csv:6:workload \(thread [0-9]+\) *</pre>' segment_plot.dom
  [ "$(grep -o '<rect [^>]*stroke="black"[^>]*fill="white"' segment_plot.dom | wc -l)" -eq 2 ]
  # Drawn: the first segment full of its block, the second's two blocks, then its free part.
  boxes_are segment_plot.png 450 60 100 60 tableau 380 230 60 60 tableau \
    550 230 100 60 tableau 850 230 100 60 '#ffffff'
}

@test "an RMM trace (no gpucap columns) exports as device 0" {
  command -v python3 >/dev/null || skip "python3 is not installed"
  printf 'Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00.0,allocate,0x1000,256,0x0\n%s\n' \
    '1,10:00:00.1,allocate failure,(nil),512,0x0' >rmm.csv
  run "$GPUCAP" export --format torch-snapshot rmm.csv -o rmm.pickle
  status_is 0
  run python3 -c 'import pickle,sys; d = pickle.load(open(sys.argv[1], "rb"))
print([e["action"] for e in d["device_traces"][0]], [s["device"] for s in d["segments"]])' \
    rmm.pickle
  [ "$output" = "['segment_alloc', 'alloc', 'oom'] [0]" ]
}

@test "-o - writes to standard output; - reads standard input" {
  grun_leaks --limit 2GiB --trace ./trace.csv --quiet -- "$WORKLOAD" >/dev/null 2>&1
  run "$GPUCAP" export --format perfetto -o - - <trace.csv
  status_is 0
  [[ "$output" == '{"displayTimeUnit"'*']}' ]]
}

@test "bad input and usage errors" {
  printf 'Thread,Time,Action,Pointer,Size,Stream\n1,oops\n' >bad.csv
  run --separate-stderr "$GPUCAP" export --format perfetto bad.csv -o x.json
  status_is 1
  err_has "gpucap: error: export: bad.csv: line 2: expected 6 comma-separated fields"
  [ ! -e x.json ]
  run --separate-stderr "$GPUCAP" export --format perfetto nonexistent.csv -o x.json
  status_is 1
  err_has "export: cannot open 'nonexistent.csv'"
  run --separate-stderr "$GPUCAP" export bad.csv -o x.json
  status_is 2
  err_has "export: no format given; add --format torch-snapshot or --format perfetto"
  run --separate-stderr "$GPUCAP" export --format svg bad.csv -o x
  status_is 2
  err_has "export: --format 'svg': not a format; accepted: torch-snapshot, perfetto"
  run --separate-stderr "$GPUCAP" export --format perfetto bad.csv
  status_is 2
  err_has "export: no output given"
  run --separate-stderr "$GPUCAP" export --format perfetto -o x
  status_is 2
  err_has "export: no trace given"
  run --separate-stderr "$GPUCAP" export --format perfetto a.csv b.csv -o x
  status_is 2
  err_has "export: one TRACE.csv at a time"
  run --separate-stderr "$GPUCAP" export --format perfetto --format perfetto a.csv -o x
  status_is 2
  err_has "export: --format is given twice"
  run --separate-stderr "$GPUCAP" export --colour a.csv -o x
  status_is 2
  err_has "export: unknown option '--colour'"
}

@test "--help and --version" {
  run "$GPUCAP" export --help
  status_is 0
  has "Usage: gpucap export --format FORMAT TRACE.csv -o OUT"
  has "pytorch.org/memory_viz"
  run "$GPUCAP" help export
  status_is 0
  has "Usage: gpucap export"
  run "$GPUCAP" export --version
  status_is 0
  [[ "$output" =~ ^gpucap\ [0-9.]+$ ]]
}

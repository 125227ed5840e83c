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
  ! grep -q ',0,alloc,' d1.csv
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

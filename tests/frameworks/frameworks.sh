#!/usr/bin/env bash
# Real frameworks from PyPI over the fake driver, each workload run without gpucap (a 4 GiB fake
# device) and under gpucap (a cap of 1 GiB): the framework must see the device or the cap as its
# total, raise its own out-of-memory error for an over-size request and go on (the workloads
# check that themselves, tests/frameworks/*_workload.py); from outside, the fake driver's own
# per-process peak (what its NVML lists for the process, nvidia-smi's figure: allocations and the
# driver's own memory, a context alone holding 401 MiB) must stay within the device or the cap,
# with no hazards and no work left pending, and gpucap's exit report must agree with the fake.
# The frameworks are installed by `make frameworks` (make test runs it); without them every row
# is skipped, and says why.
. "$TOP/tests/integ/lib.sh"

venv=${FRAMEWORKS_VENV:-}
py="$venv/bin/python"
rows="torch-caching torch-allocations torch-no-caching torch-async torch-expandable torch-graph
  torch-graph-uncapped
  cupy-pool cupy-async cupy-none
  cupy-managed cupy-mixed-uncapped cupy-mixed numba cuda-python"
if [ -z "$venv" ] || [ ! -f "$venv/.complete" ]; then
  why="frameworks not installed: run 'make frameworks'"
  [ -n "$venv" ] && [ -f "$venv.failed" ] && why="$(head -n 1 "$venv.failed")"
  for r in $rows; do skip "framework row $r" "$why"; done
  done_testing
fi
export PYTHONPATH="$TOP/tests/frameworks" PYTHONDONTWRITEBYTECODE=1
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 # Python's own allocations live to exit
# Under a sanitizer, libstdc++ loads with the runtime, before the frameworks' C++ libraries:
# ASan resolves its __cxa_throw interceptor only at start-up.
if [ -n "${SAN_PRELOAD:-}" ]; then
  SAN_PRELOAD="$SAN_PRELOAD $(${CC:-cc} -print-file-name=libstdc++.so.6)"
fi
device=$((4 << 30))

# run_workload with|without SCRIPT VAR=VALUE...: the workload in a subshell with those settings.
run_workload() {
  local shim=$1 script=$2
  shift 2
  (
    for kv in "$@"; do export "${kv?}"; done
    "${shim}_shim" "$py" "$TOP/tests/frameworks/$script"
  )
}

# row NAME CAP EXPECT_OOM SCRIPT [VAR=VALUE...]: the workload without and with gpucap (CAP
# "none": gpucap without a cap).
# EXPECT_OOM may be WITHOUT|WITH when the answers differ (a documented rule).
# DRIVER_CALL=NAME among the settings: the fake driver must also have served NAME (the path the
# row is about). LIBRARY=NAME: gpucap's per-library ledger must name NAME as holding memory.
# GPUCAP_CAP_COVERS=allocations: the cap on allocations alone, whose peak passes the cap (the rule
# before the cap covered the process).
row() {
  name=$1 cap=$2 oom=$3 script=$4 call="" lib="" over=""
  shift 4
  for kv in "$@"; do
    case $kv in
    DRIVER_CALL=*) call=${kv#DRIVER_CALL=} ;;
    LIBRARY=*) lib=${kv#LIBRARY=} ;;
    GPUCAP_CAP_COVERS=allocations) over=1 ;;
    esac
  done
  for shim in without with; do
    stats="$WORK/$name.$shim.json"
    report="$WORK/$name.$shim.report.json"
    total=$device limit=$cap
    [ $cap = none ] && limit=""
    [ $shim = with ] && [ $cap != none ] && total=$cap
    expect_oom=$oom
    case $oom in
    *"|"*) if [ $shim = with ]; then expect_oom=${oom#*|}; else expect_oom=${oom%%|*}; fi ;;
    esac
    tap_program "$name, $shim gpucap: the workload's own checks" \
      run_workload $shim "$script" "$@" EXPECT_TOTAL=$total EXPECT_OOM=$expect_oom FAKECUDA_MEMORY=4GiB \
      FAKECUDA_STATS="$stats" GPUCAP_MEMORY_LIMIT=$limit GPUCAP_REPORT=off \
      GPUCAP_REPORT_JSON="$report"
    peak=$(grep -o '"peak_bytes": [0-9]*' "$stats" 2>/dev/null | head -n 1 | sed 's/.*: //')
    if [ $shim = with ] && [ -n "$over" ]; then
      ok "$([ -n "$peak" ] && [ "$peak" -gt "$total" ]; echo $?)" \
        "$name, with gpucap: the cap on allocations alone: the peak ${peak:-?} B passes $total B"
    else
      ok "$([ -n "$peak" ] && [ "$peak" -le "$total" ]; echo $?)" \
        "$name, $shim gpucap: the process's peak ${peak:-?} B stays within $total B"
    fi
    is "$(json_num "$stats" hazards)/$(json_num "$stats" pending_work)" "0/0" \
      "$name, $shim gpucap: no hazards and no pending work at exit"
    if [ -n "$call" ]; then
      n=$(json_obj_num "$stats" calls "$call")
      ok "$([ "${n:-0}" -gt 0 ]; echo $?)" "$name, $shim gpucap: the driver served $call (${n:-0})"
    fi
    if [ $shim = with ]; then
      printf '# %s: the driver held %s B for the process at most (%s), %s\n' "$name" \
        "$(json_num "$report" peak_driver_bytes)" \
        "$(grep -o '"driver_measured_by": [^,]*' "$report" | sed 's/.*: //')" \
        "$(tr -d '\n' <"$report" | grep -o '"driver_peak_by_cause": {[^}]*}')"
      pool=$(grep -o '"peak_pool_bytes": [0-9]*' "$report" | sed 's/.*: //' | sort -n | tail -n 1)
      ok "$([ -n "$pool" ] && [ "$pool" -le "${peak:-0}" ]; echo $?)" \
        "$name, with gpucap: the report's peak pool ${pool:-?} B is memory the driver held"
      if [ -n "$lib" ]; then
        is "$("$py" -c 'import json, sys
u = json.load(open(sys.argv[1]))["usage"][0]
libs = {l["name"]: l for l in u["libraries"]}
adds = sum(l["held_bytes"] for l in libs.values()) == u["held_bytes"]
print(adds and sys.argv[2] in libs and libs[sys.argv[2]]["peak_held_bytes"] > 0)' \
          "$report" "$lib" 2>&1)" True \
          "$name, with gpucap: the ledger names $lib, and the libraries add up to the total"
      fi
    fi
  done
}

row torch-caching $((1 << 30)) OutOfMemoryError torch_workload.py LIBRARY=libc10_cuda
row torch-allocations $((1 << 30)) OutOfMemoryError torch_workload.py GPUCAP_CAP_COVERS=allocations
# Without its cache PyTorch raises the runtime's error as torch.AcceleratorError: its own rule.
row torch-no-caching $((1 << 30)) AcceleratorError torch_workload.py \
  PYTORCH_NO_CUDA_MEMORY_CACHING=1
# PyTorch's stream-ordered allocator (cudaMallocAsync, the driver's memory pools).
row torch-async $((1 << 30)) OutOfMemoryError torch_workload.py \
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
# Expandable segments: VMM memory (cuMemCreate with a file-descriptor handle type, cuMemMap)
# that grows and shrinks; PyTorch asks NVML for fabric support first.
row torch-expandable $((1 << 30)) OutOfMemoryError torch_workload.py \
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True DRIVER_CALL=cuMemCreate
# Warm up, then capture a training step as a CUDA graph and replay it: torch.cuda.graph()
# frees PyTorch's cache just before the capture allocates new segments. With a cap and without.
row torch-graph $((1 << 30)) OutOfMemoryError torch_graph_workload.py DRIVER_CALL=cuGraphLaunch
row torch-graph-uncapped none OutOfMemoryError torch_graph_workload.py
case "${SAN_PRELOAD:-}" in
*libasan*)
  # NVRTC loads its builtins with RTLD_DEEPBIND, which AddressSanitizer refuses.
  skip "framework row cupy-pool" "CuPy compiles with NVRTC, which cannot load under ASan"
  skip "framework row cupy-async" "CuPy compiles with NVRTC, which cannot load under ASan"
  skip "framework row cupy-none" "CuPy compiles with NVRTC, which cannot load under ASan"
  skip "framework row cupy-managed" "CuPy compiles with NVRTC, which cannot load under ASan"
  skip "framework row cupy-mixed-uncapped" "CuPy compiles with NVRTC, which cannot load under ASan"
  skip "framework row cupy-mixed" "CuPy compiles with NVRTC, which cannot load under ASan"
  ;;
*)
  row cupy-pool $((1 << 30)) - cupy_workload.py CUPY_MODE=pool \
    LIBRARY=cupy_backends.cuda.api.runtime
  row cupy-async $((1 << 30)) - cupy_workload.py CUPY_MODE=async
  row cupy-none $((1 << 30)) - cupy_workload.py CUPY_MODE=none
  # Managed memory is charged to the cap (docs/compatibility.md): refused beyond it under
  # gpucap, oversubscribed without (the driver pages it).
  row cupy-managed $((1 << 30)) "None|OutOfMemoryError" cupy_workload.py CUPY_MODE=managed \
    DRIVER_CALL=cuMemAllocManaged
  # The default pool and the stream-ordered pool in turn (cupy_workload.py's mixed_pools):
  # with no cap, what one freed serves the other (the driver's refusal makes gpucap give its
  # idle memory back); under the cap, what the stream-ordered pool keeps is charged and trimmed
  # for the default pool (the fake's peak stays within the cap). The bare fake keeps the driver
  # pool's memory and refuses the last step.
  row cupy-mixed-uncapped none "OutOfMemoryError|None" cupy_workload.py CUPY_MODE=mixed
  row cupy-mixed $((1 << 30)) "OutOfMemoryError|None" cupy_workload.py CUPY_MODE=mixed
  ;;
esac
row numba $((1 << 30)) - numba_workload.py FAKECUDA_BACKING=1
row cuda-python $((1 << 30)) - cudapy_workload.py
done_testing

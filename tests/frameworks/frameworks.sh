#!/usr/bin/env bash
# Real frameworks from PyPI over the fake driver, each workload run without gpucap (a 4 GiB fake
# device) and under gpucap (a cap of 256 MiB, 1 GiB for PyTorch, 48 MiB shared by the three
# processes of torch-ipc): the framework must see the
# device or the cap as its total, raise its own out-of-memory error for an over-size request and
# go on (the workloads check that themselves, tests/frameworks/*_workload.py); from outside, the
# fake driver's own per-device peak must stay within the device or the cap, with no hazards and
# no work left pending, and gpucap's exit report must agree with the fake. The frameworks are
# installed by `make frameworks` (make test runs it); without them every row is skipped, and
# says why.
. "$TOP/tests/integ/lib.sh"

venv=${FRAMEWORKS_VENV:-}
py="$venv/bin/python"
rows="torch-caching torch-no-caching torch-async torch-expandable torch-graph torch-graph-uncapped
  torch-ipc cupy-pool cupy-async cupy-none cupy-managed cupy-managed-spill cupy-mixed-uncapped
  cupy-mixed numba cuda-python"
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
row() {
  name=$1 cap=$2 oom=$3 script=$4 call="" lib=""
  shift 4
  for kv in "$@"; do
    case $kv in
    DRIVER_CALL=*) call=${kv#DRIVER_CALL=} ;;
    LIBRARY=*) lib=${kv#LIBRARY=} ;;
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
    ok "$([ -n "$peak" ] && [ "$peak" -le "$total" ]; echo $?)" \
      "$name, $shim gpucap: the driver's peak ${peak:-?} B stays within $total B"
    is "$(json_num "$stats" hazards)/$(json_num "$stats" pending_work)" "0/0" \
      "$name, $shim gpucap: no hazards and no pending work at exit"
    if [ -n "$call" ]; then
      n=$(json_obj_num "$stats" calls "$call")
      ok "$([ "${n:-0}" -gt 0 ]; echo $?)" "$name, $shim gpucap: the driver served $call (${n:-0})"
    fi
    if [ $shim = with ]; then
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

# sum_calls NAME FILES...: the calls of NAME the fake served in all those processes.
sum_calls() {
  local name=$1 f n total=0
  shift
  for f in "$@"; do
    n=$(json_obj_num "$f" calls "$name")
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

# ipc_workload TOTAL MACHINE STATS [RUNNER...]: torch_ipc_workload.py on fake machine MACHINE
# (backed, so that bytes cross), each process's statistics in STATS, run by RUNNER.
ipc_workload() {
  (
    export EXPECT_TOTAL=$1 FAKECUDA_MEMORY=4GiB FAKECUDA_BACKING=1 FAKECUDA_MACHINE=$2 \
      FAKECUDA_STATS=$3
    shift 3
    without_shim "$@" "$py" "$TOP/tests/frameworks/torch_ipc_workload.py"
  )
}

# torch.multiprocessing sharing CUDA tensors with two spawned children and back
# (torch_ipc_workload.py), the three processes on one fake machine: without gpucap on the
# device, with gpucap under `gpucap run --share` (the default pool: a block's units travel as
# file descriptors), one 48 MiB budget for the three, which the workload stays within only if
# imported memory is its exporter's charge and nobody else's. From outside: the machine's peak
# within the device or the budget, each process's own within it too, no hazards and no work
# left pending in any, and the driver served PyTorch's interprocess events (and, with gpucap,
# the units' descriptors).
torch_ipc_row() {
  local budget=$((48 << 20)) shim d total uid machine share stats peak p bad n
  uid=$(id -u)
  for shim in without with; do
    d="$WORK/torch-ipc.$shim"
    mkdir -p "$d"
    machine="torch-ipc-$$-$shim"
    share="torch-ipc-$$"
    total=$device
    [ $shim = with ] && total=$budget
    runner=()
    [ $shim = with ] && runner=("$BUILD/gpucap" run --limit "$budget" --share "$share" --quiet --)
    tap_program "torch-ipc, $shim gpucap: the workload's own checks" \
      ipc_workload "$total" "$machine" "$d/s.%p.json" "${runner[@]}"
    rm -f "/dev/shm/fakecuda.$uid.$machine" "/dev/shm/gpucap-budget.$uid.$share"
    stats=("$d"/s.*.json)
    for f in "${stats[@]}"; do # PyTorch's reference counters of shared tensors, if left
      p=${f##*/s.}
      rm -f /dev/shm/torch_"${p%.json}"_*
    done
    is "${#stats[@]}" 3 "torch-ipc, $shim gpucap: three processes used the device"
    peak=0
    bad=0
    for f in "${stats[@]}"; do
      p=$(json_num "$f" machine_peak_bytes)
      [ "${p:-0}" -gt "$peak" ] && peak=$p
      p=$(json_num "$f" peak_bytes)
      [ -n "$p" ] && [ "$p" -le "$total" ] || bad=$((bad + 1))
      n=$(($(json_num "$f" hazards) + $(json_num "$f" pending_work)))
      [ "$n" -eq 0 ] || bad=$((bad + 1))
    done
    [ "$peak" -gt 0 ] && [ "$peak" -le "$total" ]
    ok $? "torch-ipc, $shim gpucap: the machine's peak $peak B stays within $total B"
    is "$bad" 0 "torch-ipc, $shim gpucap: each process's peak within it, no hazards, no pending work"
    n="$(sum_calls cuIpcGetEventHandle "${stats[@]}")/$(sum_calls cuIpcOpenEventHandle "${stats[@]}")"
    like "$n" '^[1-9][0-9]*/[1-9][0-9]*$' \
      "torch-ipc, $shim gpucap: the driver served interprocess events (exported/opened $n)"
    if [ $shim = with ]; then
      n="$(sum_calls cuMemExportToShareableHandle "${stats[@]}")/$(sum_calls \
        cuMemImportFromShareableHandle "${stats[@]}")"
      like "$n" '^[1-9][0-9]*/[1-9][0-9]*$' \
        "torch-ipc, with gpucap: pooled blocks travelled as unit descriptors (exported/imported $n)"
    fi
  done
}
torch_ipc_row

case "${SAN_PRELOAD:-}" in
*libasan*)
  # NVRTC loads its builtins with RTLD_DEEPBIND, which AddressSanitizer refuses.
  skip "framework row cupy-pool" "CuPy compiles with NVRTC, which cannot load under ASan"
  skip "framework row cupy-async" "CuPy compiles with NVRTC, which cannot load under ASan"
  skip "framework row cupy-none" "CuPy compiles with NVRTC, which cannot load under ASan"
  skip "framework row cupy-managed" "CuPy compiles with NVRTC, which cannot load under ASan"
  skip "framework row cupy-managed-spill" "CuPy compiles with NVRTC, which cannot load under ASan"
  skip "framework row cupy-mixed-uncapped" "CuPy compiles with NVRTC, which cannot load under ASan"
  skip "framework row cupy-mixed" "CuPy compiles with NVRTC, which cannot load under ASan"
  ;;
*)
  row cupy-pool $((256 << 20)) - cupy_workload.py CUPY_MODE=pool \
    LIBRARY=cupy_backends.cuda.api.runtime
  row cupy-async $((256 << 20)) - cupy_workload.py CUPY_MODE=async
  row cupy-none $((256 << 20)) - cupy_workload.py CUPY_MODE=none
  # Managed memory is charged to the cap (docs/compatibility.md): refused beyond it under
  # gpucap, oversubscribed without (the driver pages it: both arrays are filled by kernels, and
  # the fake's device evicts pages to hold 6 GiB in 4).
  row cupy-managed $((256 << 20)) "None|OutOfMemoryError" cupy_workload.py CUPY_MODE=managed \
    DRIVER_CALL=cuMemAllocManaged
  # With a spill budget (GPUCAP_OVERSUBSCRIBE) the second array is served beyond the cap, kept in
  # host memory: both are filled, and the device's peak, managed pages included, stays within
  # the cap.
  row cupy-managed-spill $((256 << 20)) None cupy_workload.py CUPY_MODE=managed \
    GPUCAP_OVERSUBSCRIBE=512MiB DRIVER_CALL=cuMemAllocManaged
  spilled=$(json_num "$WORK/cupy-managed-spill.with.report.json" peak_spilled_bytes)
  ok "$([ "${spilled:-0}" -gt $((64 << 20)) ]; echo $?)" \
    "cupy-managed-spill, with gpucap: the report says ${spilled:-0} bytes spilled at peak"
  # The default pool and the stream-ordered pool in turn (cupy_workload.py's mixed_pools):
  # with no cap, what one freed serves the other (the driver's refusal makes gpucap give its
  # idle memory back); under the cap, what the stream-ordered pool keeps is charged and trimmed
  # for the default pool (the fake's peak stays within the cap). The bare fake keeps the driver
  # pool's memory and refuses the last step.
  row cupy-mixed-uncapped none "OutOfMemoryError|None" cupy_workload.py CUPY_MODE=mixed
  row cupy-mixed $((256 << 20)) "OutOfMemoryError|None" cupy_workload.py CUPY_MODE=mixed
  ;;
esac
row numba $((256 << 20)) - numba_workload.py FAKECUDA_BACKING=1
row cuda-python $((256 << 20)) - cudapy_workload.py
done_testing

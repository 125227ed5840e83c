#!/usr/bin/env bash
# PyTorch, CuPy, numba-cuda and cuda-python from PyPI over the fake driver (tests/frameworks/
# rows.sh says how a row is judged), each workload without gpucap (a 4 GiB fake device) and
# under gpucap (a cap of 1 GiB; "none": gpucap without a cap): the framework must see the device
# or the cap as its total, raise its own out-of-memory error for an over-size request and go on
# (the workloads check that themselves, tests/frameworks/*_workload.py). The fake's per-process
# peak is what its NVML lists for the process, nvidia-smi's figure: allocations and the driver's
# own memory, a context alone holding 401 MiB. torch-ipc runs three processes on one fake
# machine, judged on its own (torch_ipc_row). The frameworks are installed by `make frameworks`
# (make test runs it); without them every row is skipped, and says why.
. "$TOP/tests/integ/lib.sh"
. "$TOP/tests/frameworks/rows.sh"

rows_venv "${FRAMEWORKS_VENV:-}" torch-caching torch-allocations torch-no-caching torch-async \
  torch-expandable torch-graph torch-graph-uncapped torch-ipc cupy-pool cupy-async cupy-none cupy-managed \
  cupy-managed-spill cupy-mixed-uncapped cupy-mixed numba cuda-python

row torch-caching $((1 << 30)) torch_workload.py EXPECT_OOM=OutOfMemoryError LIBRARY=libc10_cuda
# The cap on allocations alone (the rule before the cap covered the process): the process's
# peak, its driver memory included, passes the cap.
row torch-allocations $((1 << 30)) torch_workload.py EXPECT_OOM=OutOfMemoryError \
  GPUCAP_CAP_COVERS=allocations
# Without its cache PyTorch raises the runtime's error as torch.AcceleratorError: its own rule.
row torch-no-caching $((1 << 30)) torch_workload.py EXPECT_OOM=AcceleratorError \
  PYTORCH_NO_CUDA_MEMORY_CACHING=1
# PyTorch's stream-ordered allocator (cudaMallocAsync, the driver's memory pools).
row torch-async $((1 << 30)) torch_workload.py EXPECT_OOM=OutOfMemoryError \
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
# Expandable segments: VMM memory (cuMemCreate with a file-descriptor handle type, cuMemMap)
# that grows and shrinks; PyTorch asks NVML for fabric support first.
row torch-expandable $((1 << 30)) torch_workload.py EXPECT_OOM=OutOfMemoryError \
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True DRIVER_CALL=cuMemCreate
# Warm up, then capture a training step as a CUDA graph and replay it: torch.cuda.graph()
# frees PyTorch's cache just before the capture allocates new segments. With a cap and without.
row torch-graph $((1 << 30)) torch_graph_workload.py EXPECT_OOM=OutOfMemoryError \
  DRIVER_CALL=cuGraphLaunch
row torch-graph-uncapped none torch_graph_workload.py EXPECT_OOM=OutOfMemoryError
case "${SAN_PRELOAD:-}" in
*libasan*)
  # NVRTC loads its builtins with RTLD_DEEPBIND, which AddressSanitizer refuses.
  for r in cupy-pool cupy-async cupy-none cupy-managed cupy-managed-spill cupy-mixed-uncapped \
    cupy-mixed; do
    skip "framework row $r" "CuPy compiles with NVRTC, which cannot load under ASan"
  done
  ;;
*)
  row cupy-pool $((1 << 30)) cupy_workload.py CUPY_MODE=pool \
    LIBRARY=cupy_backends.cuda.api.runtime
  row cupy-async $((1 << 30)) cupy_workload.py CUPY_MODE=async
  row cupy-none $((1 << 30)) cupy_workload.py CUPY_MODE=none
  # Managed memory is charged to the cap (docs/compatibility.md): refused beyond it under
  # gpucap, oversubscribed without (the driver pages it: both arrays are filled by kernels, and
  # the fake's device evicts pages to hold 6 GiB in 4).
  row cupy-managed $((1 << 30)) cupy_workload.py CUPY_MODE=managed \
    "EXPECT_OOM=None|OutOfMemoryError" DRIVER_CALL=cuMemAllocManaged
  # With a spill budget (GPUCAP_OVERSUBSCRIBE) the second array is served beyond the cap, kept in
  # host memory: both are filled, and the device's peak, managed pages included, stays within
  # the cap.
  row cupy-managed-spill $((1 << 30)) cupy_workload.py CUPY_MODE=managed EXPECT_OOM=None \
    GPUCAP_OVERSUBSCRIBE=2GiB DRIVER_CALL=cuMemAllocManaged
  # The default pool and the stream-ordered pool in turn (cupy_workload.py's mixed_pools):
  # with no cap, what one freed serves the other (the driver's refusal makes gpucap give its
  # idle memory back); under the cap, what the stream-ordered pool keeps is charged and trimmed
  # for the default pool (the fake's peak stays within the cap). The bare fake keeps the driver
  # pool's memory and refuses the last step.
  row cupy-mixed-uncapped none cupy_workload.py CUPY_MODE=mixed \
    "EXPECT_OOM=OutOfMemoryError|None"
  row cupy-mixed $((1 << 30)) cupy_workload.py CUPY_MODE=mixed "EXPECT_OOM=OutOfMemoryError|None"
  ;;
esac
row numba $((1 << 30)) numba_workload.py FAKECUDA_BACKING=1
row cuda-python $((1 << 30)) cudapy_workload.py
rows_run
if [ -f "$WORK/cupy-managed-spill.with.report.json" ]; then
  spilled=$(json_num "$WORK/cupy-managed-spill.with.report.json" peak_spilled_bytes)
  ok "$([ "${spilled:-0}" -gt $((64 << 20)) ]; echo $?)" \
    "cupy-managed-spill, with gpucap: the report says ${spilled:-0} bytes spilled at peak"
fi

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
      FAKECUDA_STATS=$3 FAKECUDA_DRIVER_MEMORY=off # the subject is IPC: contexts cost nothing
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
done_testing

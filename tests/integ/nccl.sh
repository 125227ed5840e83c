#!/usr/bin/env bash
# NVIDIA's NCCL (the toolkit's libnccl.so.2) over the fake CUDA driver and the fake NVML: a
# single-rank communicator on device 0 of two. NCCL refuses to start without libnvidia-ml.so.1;
# with the fake NVML beside the fake driver it must get through its NVML start-up (nvmlInit_v2,
# the device count, handles, compute capabilities, P2P status of every pair, the handle by PCI bus
# id) with every call answered, and go on to its next driver call. The communicator itself, its
# collectives and memory are a row of tests/real/libs.sh; here the result is printed, not
# asserted. Skipped without a toolkit that has NCCL.
. "$TOP/tests/integ/lib.sh"
unset FAKENVML_FAIL

cuda=${CUDA_HOME:-}
if [ -z "$cuda" ] && command -v nvcc >/dev/null; then
  cuda=$(dirname "$(dirname "$(command -v nvcc)")")
fi
lib="$cuda/lib64"
[ -d "$lib" ] || lib="$cuda/lib"
if [ -z "$cuda" ] || [ ! -f "$cuda/include/nccl.h" ] || [ ! -e "$lib/libnccl.so.2" ]; then
  skip "NCCL over the fakes" "no CUDA toolkit with NCCL (set CUDA_HOME or put nvcc on PATH)"
  done_testing
fi

cc -I"$cuda/include" "$TOP/tests/integ/nccl_prog.c" -o "$WORK/nccl" -L"$lib" -lnccl -lcudart \
  -Wl,-rpath,"$lib" 2>"$WORK/cc.err"
ok $? "built against libnccl.so.2 and libcudart.so"
sed 's/^/# /' "$WORK/cc.err" | head -5

# run NAME WRAPPER: NCCL over the fakes (two devices); its output, stderr and the trace of both
# fakes in $WORK.
# NCCL's own allocations are not ours to check for leaks.
run() {
  rm -f "$WORK/$1.trace"
  FAKECUDA_DEVICES=2 FAKECUDA_TRACE="$WORK/$1.trace" NCCL_DEBUG=INFO \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    "$2" timeout 120 "$WORK/nccl" >"$WORK/$1.out" 2>"$WORK/$1.err"
}

for mode in without_shim with_shim; do
  run "$mode" "$mode"
  ok $? "$mode: the program runs to its end"
  like "$(cat "$WORK/$mode.out")" 'version 228[0-9][0-9]' \
    "$mode: NCCL 2.28 ($(head -n 1 "$WORK/$mode.out"))"
  grep -q 'Failed to open libnvidia-ml.so.1' "$WORK/$mode.out" "$WORK/$mode.err"
  ok $((! $?)) "$mode: NCCL opens libnvidia-ml.so.1 (the fake NVML)"
  t="$WORK/$mode.trace"
  grep 'fakenvml: trace:' "$t" | sed 's/.*\] //' >"$WORK/$mode.nvml"
  want="nvmlInit_v2 = 0 nvmlDeviceGetCount_v2 = 0 nvmlDeviceGetHandleByIndex = 0"
  # NCCL's own calls: gpucap's (its init, and what NVML lists for the process: the measure of
  # the driver's memory the cap covers) left out.
  is "$(grep -v 'GetHandleByUUID\|GetComputeRunningProcesses' "$WORK/$mode.nvml" |
    awk '$1 != "nvmlInit_v2" || !init++' | head -n 4 | tr '\n' ' ')" \
    "$want nvmlDeviceGetCudaComputeCapability = 0 " \
    "$mode: NVML start-up: init, count, handle and compute capability of device 0"
  is "$(grep -c '^nvmlDeviceGetP2PStatus = 0$' "$WORK/$mode.nvml")" 8 \
    "$mode: the P2P status of each of the 2 x 2 pairs, read and write, answered"
  grep -q '^nvmlDeviceGetHandleByPciBusId = 0$' "$WORK/$mode.nvml"
  ok $? "$mode: the communicator's device found by its PCI bus id"
  is "$(grep -v ' = [03]$' "$WORK/$mode.nvml" | tr '\n' ' ')" "" \
    "$mode: every NVML call answered SUCCESS or NOT_SUPPORTED"
  last=$(grep -n 'fakenvml: trace:' "$t" | grep -v 'GetHandleByUUID\|GetComputeRunningProcesses' |
    tail -n 1 | cut -d: -f1)
  next=$(tail -n +"$((${last:-999999999} + 1))" "$t" | grep -m 1 'fakecuda: trace:' |
    sed 's/.*\] //')
  like "$next" '^cu' "$mode: NCCL went on past NVML to the driver ($next)"
  # Where it stands afterwards, for the record (not asserted: the driver side's to fix).
  printf '# %s: %s\n' "$mode" "$(grep '^init ' "$WORK/$mode.out")"
  grep 'fakecuda: trace: .* = [1-9][0-9]*$' "$t" | grep -v 'cuGetProcAddress\|cuGetExportTable' |
    sed 's/.*\] //' | sort | uniq -c |
    sed 's/^ *\([0-9]*\) \(.*\)/#   failed driver call: \2 (x\1)/'
done
done_testing

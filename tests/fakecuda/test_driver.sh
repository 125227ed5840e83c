#!/usr/bin/env bash
# The fake driver's own device memory (fk_driver.c, the pages of fk_mem.c) from outside: the
# checks of driver_check under the defaults and each setting, and on a shared machine what the
# fake NVML lists for the process and what the machine's ledger holds.
. "$TOP/tests/integ/lib.sh"

check="$TESTBIN/fakecuda_driver_check"
cubin=
if command -v nvcc >/dev/null &&
  nvcc -arch=sm_90 -cubin -o "$WORK/deep.cubin" "$TOP/tests/fakecuda/deep.cu" 2>"$WORK/nvcc.err"; then
  cubin="$WORK/deep.cubin"
fi
fake() { without_shim "$check" "$@"; }
tap_program "the defaults: contexts, limits, pages and modules" fake model $cubin
FAKECUDA_MEMORY=256MiB tap_program "a device too small for a context" fake full
FAKECUDA_DRIVER_MEMORY=off tap_program "FAKECUDA_DRIVER_MEMORY=off" fake off
FAKECUDA_CONTEXT_MEMORY=0 FAKECUDA_PAGE_SIZE=64KiB \
  tap_program "FAKECUDA_CONTEXT_MEMORY and FAKECUDA_PAGE_SIZE" fake custom

# On a shared machine: the fake NVML's per-process figure and the machine's peak include the
# context (401 MiB) and the page a 1-byte allocation holds.
machine="drv$$"
out=$(FAKECUDA_MACHINE=$machine FAKECUDA_STATS="$WORK/smi.json" without_shim "$TESTBIN/smi" cuda 1)
context=$(((128 << 20) + 132 * 2048 * 1024 + (9 << 20)))
is "$(procs_of "$out" | awk '{print $2}')" $((context + (2 << 20))) \
  "NVML lists the process at its context plus one page"
is "$(json_num "$WORK/smi.json" machine_peak_bytes)" $((context + (2 << 20))) \
  "the machine's peak counts them too"
is "$(json_num "$WORK/smi.json" peak_bytes)" $((context + (2 << 20))) \
  "... and so does the process's own peak"
is "$(json_num "$WORK/smi.json" context_bytes)/$(json_num "$WORK/smi.json" local_bytes)" \
  "$((128 << 20))/$((132 * 2048 * 1024))" "the report splits the driver's memory"
rm -f "/dev/shm/fakecuda.$(id -u).$machine"
done_testing

#!/usr/bin/env bash
# Fidelity beyond cuMemAlloc: stream-ordered, managed and VMM allocations under the cap,
# pointer queries that describe the program's blocks, context teardown, several devices with
# their own caps, and fork (IPC: ipc.sh).
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

export GPUCAP_MEMORY_LIMIT=64MiB
for mode in async managed vmm pointers contexts fork; do
  tap_program "$mode" with_shim "$TESTBIN/fidelity" $mode
done
FAKECUDA_DEVICES=2 GPUCAP_MEMORY_LIMIT=0:64MiB,1:32MiB tap_program "two devices, two caps" \
  with_shim "$TESTBIN/fidelity" devices
tap_program "allocation from another library's constructor" with_shim "$TESTBIN/early"
out=$(with_shim "$TESTBIN/fidelity" fork 2>&1)
is "$(printf '%s\n' "$out" | grep -c 'memory report')" 1 "only the parent prints an exit report"

done_testing

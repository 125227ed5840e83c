#!/usr/bin/env bash
# Each allocation is served by, and charged to, the device of the context current when it is
# made: a program switching contexts and devices between allocations (set, push, pop, create,
# destroy, a primary reset; two threads at once), bare and under gpucap with each pool. The
# oracle is the fake driver's: the device that holds each block, and each device's peak under
# a cap of 64 MiB on device 0 and 32 MiB on device 1 (tests/integ/ctxswitch.c).
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

export FAKECUDA_DEVICES=2 GPUCAP_REPORT=off
tap_program "bare driver: each block on the current context's device" \
  without_shim "$TESTBIN/ctxswitch" nocap
for pool in on regions off; do
  GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=0:64MiB,1:32MiB tap_program \
    "GPUCAP_POOL=$pool: each block on, and charged to, the current context's device" \
    with_shim "$TESTBIN/ctxswitch" cap
done
done_testing

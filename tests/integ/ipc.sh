#!/usr/bin/env bash
# Legacy CUDA IPC between two real processes (tests/integ/ipcpeer.c) over the fake driver with
# FAKECUDA_BACKING=1, so the bytes one side writes are the bytes the other reads. First the
# fake alone (the baseline gpucap must keep), then a pooled block shared between two gpucap
# processes (it opens at the block's address with the block's size), an importer without
# gpucap (refused, never handed an address), and the pass-through paths.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

# Legacy IPC of pooled blocks is the region pool's (a VMM-backed pool's blocks are VMM memory,
# which the driver never shares that way: checked last).
export FAKECUDA_BACKING=1 GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off GPUCAP_POOL=regions
npair=0
shm="/dev/shm/gpucap-$(id -u)"

# pair DESC EXPORTER_RUNNER IMPORTER_RUNNER IMPORTER_MODE [VAR=VALUE...]: runs one exchange
# (the settings apply to both sides) and reports each side's checks as one check.
pair() {
  local desc=$1 erun=$2 irun=$3 mode=$4 d epid estatus istatus
  shift 4
  npair=$((npair + 1))
  d="$WORK/pair$npair"
  mkdir -p "$d"
  shm_mark "$d/mark"
  (for kv in "$@"; do export "${kv?}"; done
   "$erun" "$TESTBIN/ipcpeer" export "$d" > "$d/e.out" 2> "$d/e.err") &
  epid=$!
  for _ in $(seq 300); do [ -e "$d/exported" ] && break; sleep 0.1; done
  # What the exporter published, seen from outside while the block is shared.
  local pid
  pid=$(od -An -td8 -N8 "$d/pid" 2>/dev/null | tr -d ' ')
  stat -c '%a %U' "$shm" > "$d/files" 2>/dev/null
  exports_of "$pid" "$d/mark" | xargs -r stat -c '%a %U %s' >> "$d/files" 2>/dev/null
  (for kv in "$@"; do export "${kv?}"; done
   "$irun" "$TESTBIN/ipcpeer" "$mode" "$d" > "$d/i.out" 2> "$d/i.err")
  istatus=$?
  touch "$d/imported" "$d/freed" "$d/done" # never leave the exporter waiting
  wait "$epid"
  estatus=$?
  report_sides "$desc" "$d" "$estatus" "$istatus"
  last="$d"
}

pair "the fake alone" without_shim without_shim import IPCPEER_EXPECT_WRITE=1

pair "a pooled block between two gpucap processes" with_shim with_shim import \
  IPCPEER_EXPECT_WRITE=1 IPCPEER_STALE_FAILS=1
like "$(cat "$last/i.err")" \
  "gpucap: error: cuIpcOpenMemHandle: process [0-9]* no longer shares this block" \
  "  an open after the free says why it fails"
is "$(cat "$last/files")" "700 $(id -un)
600 $(id -un) 88" "  while shared: one 88-byte export file, 0600 in a 0700 directory of the user"
exporter=$(od -An -td8 -N8 "$last/pid" | tr -d ' ')
is "$(exports_of "$exporter" "$last/mark" | wc -l)" 0 "  the exporter left no export file behind"

pair "a pooled block, importer without gpucap" with_shim without_shim refuse
is "$(cat "$last/i.err")" "" "  the refusal is the driver's (nothing printed in a process without gpucap)"

pair "GPUCAP_POOL=off: the driver's own handle, gpucap on both sides" with_shim with_shim import \
  GPUCAP_POOL=off IPCPEER_EXPECT_WRITE=1
is "$(tail -n +2 "$last/files")" "" "  no export file for memory the driver shares itself"
pair "GPUCAP_POOL=off exporter, importer without gpucap" with_shim without_shim import \
  GPUCAP_POOL=off IPCPEER_EXPECT_WRITE=1
pair "exporter without gpucap, gpucap importer" without_shim with_shim import \
  IPCPEER_EXPECT_WRITE=1

GPUCAP_POOL=vmm tap_program "a block of a VMM-backed pool: no legacy IPC, pointer queries hold" \
  with_shim "$TESTBIN/ipcpeer" vmm "$WORK"
like "$(GPUCAP_POOL=vmm with_shim "$TESTBIN/ipcpeer" vmm "$WORK" 2>&1 >/dev/null)" \
  'gpucap: warning: cuIpcGetMemHandle: .*GPUCAP_POOL=regions' "  a warning says why and what to do"

done_testing

#!/usr/bin/env bash
# Legacy CUDA IPC between two real processes (tests/integ/ipcpeer.c) over the fake driver with
# FAKECUDA_BACKING=1, so the bytes one side writes are the bytes the other reads, on one shared
# fake machine under a 64 MiB cap per process. First the fake alone (the baseline gpucap must
# keep), then a pooled block shared between two gpucap processes under the default pool (VMM:
# its units travel as file descriptors) and the region pool (the region's driver handle), with
# the cap exact on both sides by the fake's own figures; a block over several units; an importer
# without gpucap (refused, never handed an address); the pass-through paths; an exporter killed
# while its block is open elsewhere, and an importer killed while it holds one; a driver that
# will not export the pool's memory.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

cap=$((64 << 20))
uid=$(id -u)
machine="ipc-$$"
trap 'rm -f "/dev/shm/fakecuda.$uid.$machine"; rm -rf "$WORK"' EXIT
export FAKECUDA_BACKING=1 FAKECUDA_MACHINE=$machine GPUCAP_MEMORY_LIMIT=$cap GPUCAP_REPORT=off
npair=0

# sockets_of PID: the abstract sockets gpucap's IPC server of PID has open (shim/entry/ipcwire.h).
sockets_of() {
  grep -c "@gpucap-ipc\.$uid\.$1\." /proc/net/unix
}

# files_of PID: entries of PID in gpucap's old export directory (there must be none).
files_of() {
  find "/dev/shm/gpucap-$uid" -maxdepth 1 -name "$1-*" 2>/dev/null | wc -l
}

# start_exporter DIR RUNNER [VAR=VALUE...]: ipcpeer export in the background ($epid), its
# statistics in DIR/e.json; waits until it exported ($exporter: its pid).
start_exporter() {
  local d=$1 run=$2
  shift 2
  mkdir -p "$d"
  (for kv in "$@"; do export "${kv?}"; done
   FAKECUDA_STATS="$d/e.json" "$run" "$TESTBIN/ipcpeer" export "$d" > "$d/e.out" 2> "$d/e.err") &
  epid=$!
  for _ in $(seq 300); do [ -e "$d/exported" ] && break; sleep 0.1; done
  exporter=$(pid_in "$d/pid")
}

# pid_in FILE: the pid ipcpeer wrote there.
pid_in() {
  od -An -td8 -N8 "$1" 2>/dev/null | tr -d ' '
}

# pair DESC EXPORTER_RUNNER IMPORTER_RUNNER IMPORTER_MODE [VAR=VALUE...]: runs one exchange
# (the settings apply to both sides) and reports each side's checks as one check; $last is its
# folder, $exporter and $importer the two pids, DIR/sockets what the exporter had open while it
# shared.
pair() {
  local desc=$1 erun=$2 irun=$3 mode=$4 d istatus
  shift 4
  npair=$((npair + 1))
  d="$WORK/pair$npair"
  start_exporter "$d" "$erun" "$@"
  sockets_of "$exporter" > "$d/sockets"
  files_of "$exporter" > "$d/files"
  (for kv in "$@"; do export "${kv?}"; done
   FAKECUDA_STATS="$d/i.json" "$irun" "$TESTBIN/ipcpeer" "$mode" "$d" > "$d/i.out" 2> "$d/i.err")
  istatus=$?
  importer=$(pid_in "$d/ipid")
  touch "$d/imported" "$d/freed" "$d/done" # never leave the exporter waiting
  wait "$epid"
  report_sides "$desc" "$d" "$?" "$istatus"
  last="$d"
}

# cap_exact DIR: the fake's figures of an exchange under the cap: each side's own peak within
# its cap, and the machine's peak within the two caps.
cap_exact() {
  peak_within "$1/e.json" "$cap" "  exporter: "
  peak_within "$1/i.json" "$cap" "  importer: "
  local m
  m=$(json_num "$1/e.json" machine_peak_bytes)
  [ -n "$m" ] && [ "$m" -le $((2 * cap)) ]
  ok $? "  the machine's peak ($m bytes) never passed the two caps"
}

# leaves_nothing DIR: neither side has an IPC socket or an export file once both are gone.
leaves_nothing() {
  is "$(sockets_of "$exporter")/$(sockets_of "$importer")/$(files_of "$exporter")" "0/0/0" \
    "  once both are gone: no socket of either, no file"
}

pair "the fake alone" without_shim without_shim import IPCPEER_EXPECT_WRITE=1

for pool in vmm regions; do
  settings="IPCPEER_EXPECT_WRITE=1 IPCPEER_STALE_FAILS=1 IPCPEER_CAP=$cap"
  [ $pool = regions ] && settings="$settings GPUCAP_POOL=regions"
  # shellcheck disable=SC2086
  pair "a pooled block between two gpucap processes ($pool pool)" with_shim with_shim import \
    $settings
  like "$(cat "$last/i.err")" \
    "gpucap: error: cuIpcOpenMemHandle: process [0-9]* no longer shares this block" \
    "  an open after the free says why it fails"
  is "$(cat "$last/sockets")/$(cat "$last/files")" "1/0" \
    "  while shared: the exporter listens on one socket and writes no file"
  cap_exact "$last"
  if [ $pool = vmm ]; then
    n=$(json_obj_num "$last/e.json" calls cuMemExportToShareableHandle)
    m=$(json_obj_num "$last/i.json" calls cuMemImportFromShareableHandle)
  else
    n=$(json_obj_num "$last/e.json" calls cuIpcGetMemHandle)
    m=$(json_obj_num "$last/i.json" calls cuIpcOpenMemHandle_v2)
  fi
  [ "${n:-0}" -gt 0 ] && [ "${m:-0}" -gt 0 ]
  ok $? "  the driver shared the memory its way (exports $n, imports $m)"
  leaves_nothing
done

pair "a 5 MiB block over several units of the VMM-backed pool" with_shim with_shim import \
  IPCPEER_EXPECT_WRITE=1 IPCPEER_CAP=$cap IPCPEER_SIZE=$(((5 << 20) + 12345))
cap_exact "$last"
n=$(json_obj_num "$last/i.json" calls cuMemMap)
[ "${n:-0}" -ge 3 ]
ok $? "  the importer mapped each unit ($n cuMemMap calls)"

pair "a pooled block, importer without gpucap" with_shim without_shim refuse
is "$(cat "$last/i.err")" "" "  the refusal is the driver's (nothing printed in a process without gpucap)"
pair "a region pool's block, importer without gpucap" with_shim without_shim refuse \
  GPUCAP_POOL=regions

pair "GPUCAP_POOL=off: the driver's own handle, gpucap on both sides" with_shim with_shim import \
  GPUCAP_POOL=off IPCPEER_EXPECT_WRITE=1
is "$(cat "$last/sockets")" 0 "  no socket for memory the driver shares itself"
pair "GPUCAP_POOL=off exporter, importer without gpucap" with_shim without_shim import \
  GPUCAP_POOL=off IPCPEER_EXPECT_WRITE=1
pair "exporter without gpucap, gpucap importer" without_shim with_shim import \
  IPCPEER_EXPECT_WRITE=1

# Kills. The exporter killed by SIGKILL while the other process holds its block open: the
# memory stays where it is mapped, a new open fails at once (a child the exporter forked, still
# alive, does not keep its exports reachable), and nothing of the exporter is left.
for pool in vmm regions; do
  npair=$((npair + 1))
  d="$WORK/pair$npair"
  start_exporter "$d" with_shim GPUCAP_POOL=$pool IPCPEER_FORK=1
  (export GPUCAP_POOL=$pool
   FAKECUDA_STATS="$d/i.json" with_shim "$TESTBIN/ipcpeer" hold "$d" > "$d/i.out" 2> "$d/i.err") &
  ipid=$!
  for _ in $(seq 300); do [ -e "$d/opened" ] && break; sleep 0.1; done
  kill -9 "$exporter"
  wait "$epid" 2>/dev/null
  is $? 137 "$pool pool: the exporter was killed by SIGKILL while its block was open elsewhere"
  touch "$d/go"
  wait "$ipid"
  istatus=$?
  sed 's/^/    /' "$d/i.out"
  sed 's/^/# importer stderr: /' "$d/i.err" | head -5
  ok "$istatus" "  the importer's checks: its mapping still reads, a new open fails"
  like "$(cat "$d/i.err")" "process $exporter no longer shares this block" \
    "  ... refused by the system at once, though the exporter's forked child lives"
  touch "$d/done"
  importer=$(pid_in "$d/ipid")
  leaves_nothing
done

# The importer killed while it holds the block: the exporter goes on, frees it and exits.
npair=$((npair + 1))
d="$WORK/pair$npair"
start_exporter "$d" with_shim IPCPEER_EXPECT_WRITE=1
(FAKECUDA_STATS="$d/i.json" with_shim "$TESTBIN/ipcpeer" hold "$d" > "$d/i.out" 2> "$d/i.err") &
ipid=$!
for _ in $(seq 300); do [ -e "$d/opened" ] && break; sleep 0.1; done
importer=$(pid_in "$d/ipid")
kill -9 "$importer"
wait "$ipid" 2>/dev/null
is $? 137 "the importer was killed by SIGKILL while it held the block"
touch "$d/imported" "$d/done"
wait "$epid"
estatus=$?
sed 's/^/    /' "$d/e.out"
sed 's/^/# exporter stderr: /' "$d/e.err" | head -5
ok "$estatus" "  the exporter's checks: it read what the importer wrote, freed the block, exited"
leaves_nothing

GPUCAP_POOL=vmm FAKECUDA_FAIL=cuMemExportToShareableHandle:1:1 tap_program \
  "a VMM-backed pool whose memory the driver will not export: no handle, pointer queries hold" \
  with_shim "$TESTBIN/ipcpeer" unshareable "$WORK"
like "$(GPUCAP_POOL=vmm FAKECUDA_FAIL=cuMemExportToShareableHandle:1:1 with_shim \
  "$TESTBIN/ipcpeer" unshareable "$WORK" 2>&1 >/dev/null)" \
  'gpucap: warning: cuIpcGetMemHandle: the driver cannot export .*GPUCAP_POOL=regions' \
  "  a warning says why and what to do"

done_testing

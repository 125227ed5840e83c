#!/usr/bin/env bash
# VMM memory shared between two real processes through a POSIX file-descriptor shareable handle
# (tests/integ/sharepeer.c): cuMemCreate with the descriptor type, cuMemExportToShareableHandle,
# the descriptor sent over a unix socket, cuMemImportFromShareableHandle and cuMemMap in the
# other process, over the fake driver with FAKECUDA_BACKING=1 so the bytes cross. The rule
# (docs/compatibility.md): exported memory is the exporter's charge; the importer's cap never
# counts it. Judged by each side's own checks and, from outside, by each process's report of
# the fake driver: the device memory each process held never passed its cap (64 MiB), and the
# importer's peak is its own memory only.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

export FAKECUDA_BACKING=1 FAKECUDA_MEMORY=256MiB GPUCAP_REPORT=off
MiB=$((1 << 20))
cap=$((64 * MiB))
npair=0

# peak FILE: the fake's peak_bytes of device 0.
peak() {
  grep '"ordinal": 0,' "$1" | grep -o '"peak_bytes": *[0-9]*' | sed 's/.*: *//'
}

# pair DESC EXPORTER_RUNNER IMPORTER_RUNNER: one exchange; a runner with_shim runs its side
# under a cap of 64 MiB.
pair() {
  local desc=$1 erun=$2 irun=$3 d epid estatus istatus ecap=0 icap=0
  npair=$((npair + 1))
  d="$WORK/pair$npair"
  mkdir -p "$d"
  [ "$erun" = with_shim ] && ecap=$cap
  [ "$irun" = with_shim ] && icap=$cap
  SHAREPEER_CAP=$ecap GPUCAP_MEMORY_LIMIT=$cap FAKECUDA_STATS="$d/export.json" \
    "$erun" timeout 60 "$TESTBIN/sharepeer" export "$d" > "$d/e.out" 2> "$d/e.err" &
  epid=$!
  SHAREPEER_CAP=$icap GPUCAP_MEMORY_LIMIT=$cap FAKECUDA_STATS="$d/import.json" \
    "$irun" timeout 60 "$TESTBIN/sharepeer" import "$d" > "$d/i.out" 2> "$d/i.err"
  istatus=$?
  wait "$epid"
  estatus=$?
  report_sides "$desc" "$d" "$estatus" "$istatus"
  local ep ip
  ep=$(peak "$d/export.json")
  ip=$(peak "$d/import.json")
  # Capped: 32 MiB (exporter) and 48 MiB (importer) held; uncapped: 48 and 32 MiB more fit.
  is "$ep" $(((ecap ? 32 : 80) * MiB)) "$desc: the exporter's peak in the driver"
  is "$ip" $(((icap ? 48 : 80) * MiB)) \
    "$desc: the importer's peak in the driver is its own memory only"
  [ -n "$ep" ] && [ -n "$ip" ] && [ "$ep" -le $((ecap ? ecap : 1 << 40)) ] &&
    [ "$ip" -le $((icap ? icap : 1 << 40)) ]
  ok $? "$desc: no capped process held more than its cap"
  is "$(json_num "$d/export.json" hazards)/$(json_num "$d/import.json" hazards)" "0/0" \
    "$desc: no hazards on either side"
}

pair "the fake alone" without_shim without_shim
pair "gpucap on both sides" with_shim with_shim
pair "exporter under gpucap, importer without" with_shim without_shim
pair "exporter without gpucap, importer under gpucap" without_shim with_shim
done_testing

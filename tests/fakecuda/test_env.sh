#!/bin/sh
# TAP test of the fake driver's settings from outside, through fakecuda_probe: device count,
# memory and compute capability, malformed values failing loudly, FAKECUDA_FAIL fault
# injection, the FAKECUDA_STATS report (content, %p, proc_address_callers, hazards, stale
# work) and fork.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
. "$top/tests/tap.sh"
build=${BUILD:-$top/build}
probe=$build/tests/fakecuda_probe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# Start from no FAKECUDA_* setting at all.
for v in $(env | sed -n 's/^\(FAKECUDA_[A-Z_]*\)=.*/\1/p'); do
  unset "$v"
done

# p [VAR=VALUE...] -- OPS...: runs the probe with the given settings; stderr goes to $tmp/err.
p() {
  env "$@" 2>"$tmp/err"
  st=$?
  if [ "$st" -ne 0 ] || grep -q Sanitizer "$tmp/err"; then
    echo "exit $st: $*" >>"$tmp/bad"
    sed 's/^/# /' "$tmp/err" >&2
  fi
  return 0
}

# num KEY FILE [LINE-FILTER]: the number after "KEY": in FILE (on the first line matching FILTER).
num() {
  grep -e "${3:-.}" "$2" | sed -n "s/.*\"$1\": \([0-9-]*\).*/\1/p" | head -1
}

[ -x "$probe" ]
ok $? "fakecuda_probe is built"

out=$(p "$probe" version init devices)
like "$out" "version 0 13000" "cuDriverGetVersion: 13000"
like "$out" "devices 0 1" "one device by default"
like "$out" "device0 total=17179869184 cc=9.0 sms=132 name=Fake CUDA Device 0" \
  "default device: 16 GiB, compute capability 9.0"

out=$(p FAKECUDA_DEVICES=2 FAKECUDA_MEMORY=0:16GiB,1:8GiB "$probe" init devices)
like "$out" "devices 0 2" "FAKECUDA_DEVICES=2"
like "$out" "device1 total=8589934592" "FAKECUDA_MEMORY=0:16GiB,1:8GiB: device 1 has 8 GiB"
like "$out" "device0 total=17179869184" "... device 0 has 16 GiB"
out=$(p FAKECUDA_DEVICES=3 FAKECUDA_MEMORY=1:2G "$probe" init devices)
like "$out" "device1 total=2147483648" "ORD:SIZE with a K/M/G/T unit"
like "$out" "device2 total=17179869184" "devices not listed keep 16 GiB"
out=$(p FAKECUDA_DEVICES=3 FAKECUDA_MEMORY=1073741824 "$probe" init devices)
like "$out" "device2 total=1073741824" "a plain size in bytes applies to every device"
like "$out" "device0 .* pci=0000:01:00.0 bus=1" "device N sits on PCI bus N + 1 by default"
out=$(p FAKECUDA_DEVICES=3 FAKECUDA_PCI_BUS=0:3b,2:C1 "$probe" init devices)
like "$out" "device0 .* pci=0000:3B:00.0 bus=59" \
  "FAKECUDA_PCI_BUS=0:3b: the bus id in capitals, as the driver writes it, and its attribute"
like "$out" "device1 .* pci=0000:02:00.0 bus=2" "... a device not listed keeps bus N + 1"
like "$out" "device2 .* pci=0000:C1:00.0 bus=193" "... either case of hex digits"
out=$(p FAKECUDA_DEVICES=2 FAKECUDA_PCI_BUS=0:2 "$probe" init)
is "$out" "init 1" "FAKECUDA_PCI_BUS=0:2 with device 1 on bus 2: two devices on one bus are refused"
out=$(p FAKECUDA_CC=8.0 "$probe" init devices)
like "$out" "cc=8.0 sms=108" "FAKECUDA_CC=8.0 (an A100: 108 SMs)"
out=$(p FAKECUDA_DEVICES=0 "$probe" init devices)
like "$out" "init 100" "FAKECUDA_DEVICES=0: cuInit fails with CUDA_ERROR_NO_DEVICE"
like "$out" "devices 3 " "... and the driver stays uninitialised"

for setting in FAKECUDA_MEMORY=1GB FAKECUDA_MEMORY=0x40000000 FAKECUDA_MEMORY=-1 \
  FAKECUDA_MEMORY=99999999999999999999 FAKECUDA_MEMORY=512KiB FAKECUDA_MEMORY=2TiB \
  FAKECUDA_MEMORY=1:1GiB FAKECUDA_MEMORY=0:1GiB,0:2GiB FAKECUDA_MEMORY=16GiB, \
  FAKECUDA_DEVICES=abc FAKECUDA_DEVICES=65 FAKECUDA_CC=9 FAKECUDA_CC=9.10 FAKECUDA_BACKING=yes \
  FAKECUDA_STUB=true \
  FAKECUDA_FAIL=cuMemAlloc_v2 FAKECUDA_FAIL=cuNoSuchCall:1 FAKECUDA_FAIL=cuMemAlloc_v2:0 \
  FAKECUDA_FAIL=cuMemAlloc_v2:1:0 FAKECUDA_FAIL=cuMemAlloc_v2:1:x \
  FAKECUDA_LATENCY=cuMemCreate:200 FAKECUDA_LATENCY=cuMemCreate:2s \
  FAKECUDA_LATENCY=cuMemCreate:1001ms FAKECUDA_LATENCY=cuNoSuchCall:1us \
  FAKECUDA_LATENCY=cuMemMap:2us,cuMemMap:3us FAKECUDA_LATENCY=cuMemMap:2us, \
  FAKECUDA_LATENCY=:2us FAKECUDA_LATENCY=cuMemMap:-2us FAKECUDA_LATENCY_SLEEP=yes \
  FAKECUDA_MIGRATION=2 FAKECUDA_MIGRATION=2s \
  FAKECUDA_PCI_BUS=0:3g FAKECUDA_PCI_BUS=0:100 FAKECUDA_PCI_BUS=1:3b FAKECUDA_PCI_BUS=0: \
  FAKECUDA_PCI_BUS=3b \
  FAKECUDA_DRIVER_MEMORY=no FAKECUDA_CONTEXT_MEMORY=lots FAKECUDA_CONTEXT_MEMORY=2TiB \
  FAKECUDA_MODULE_MEMORY=10001% FAKECUDA_MODULE_MEMORY=1.5 FAKECUDA_PAGE_SIZE=3MiB \
  FAKECUDA_PAGE_SIZE=256 FAKECUDA_PAGE_SIZE=2GiB; do
  out=$(p "$setting" "$probe" init version gpa:cuInit:2000)
  var=${setting%%=*}
  fails=$(printf '%s\n' "$out" | grep -c -e '^init 1$' -e '^version 1 ' -e '^gpa 1 ')
  is "$fails" 3 \
    "$setting: every call fails with CUDA_ERROR_INVALID_VALUE"
  grep -q "^fakecuda: error: $var=" "$tmp/err"
  ok $? "$setting: names the variable on stderr"
done

out=$(p FAKECUDA_STUB=1 "$probe" gpa:cuInit:2000 version init ctx)
is "$(printf '%s\n' "$out" | tr '\n' ' ')" "gpa 34 0 version 34 0 init 34 ctx 34 " \
  "FAKECUDA_STUB=1: like the toolkit's stub, every call answers 34 and writes nothing"

out=$(p FAKECUDA_FAIL=cuMemAlloc_v2:3 "$probe" init ctx alloc:1 alloc:1 alloc:1 alloc:1)
is "$(printf '%s\n' "$out" | grep alloc | tr '\n' ' ')" "alloc 0 alloc 0 alloc 2 alloc 0 " \
  "FAKECUDA_FAIL=cuMemAlloc_v2:3: the third call fails with OUT_OF_MEMORY"
out=$(p FAKECUDA_FAIL=cuMemAlloc_v2:2:999,cuInit:1:100 "$probe" init init ctx alloc:1 alloc:1)
is "$(printf '%s\n' "$out" | tr '\n' ' ')" "init 100 init 0 ctx 0 alloc 0 alloc 999 " \
  "NAME:N:CODE, several entries"

json=$tmp/stats.json
# The report's figures exactly: without the driver's own memory (test_driver.sh has it).
p FAKECUDA_DRIVER_MEMORY=off FAKECUDA_STATS="$json" "$probe" init ctx alloc:1000 alloc:4096 alloc:512 free:1 work:0 \
  claim:0 claim:2 sync gpa:cuMemAlloc:3020 gpa:cuNothing:1000 callergpa:cuMemFree:3020 >"$tmp/out"
[ -s "$json" ]
ok $? "FAKECUDA_STATS writes the report at exit"
if perl -MJSON::PP -e 1 2>/dev/null; then
  perl -MJSON::PP -e 'local $/; decode_json(<STDIN>)' <"$json"
  ok $? "the report is valid JSON"
else
  skip "the report is valid JSON" "no JSON::PP"
fi
dev0='"ordinal": 0'
is "$(num alloc_calls "$json" "$dev0")" 3 "device 0 alloc_calls"
is "$(num free_calls "$json" "$dev0")" 1 "device 0 free_calls"
is "$(num live_bytes "$json" "$dev0")" 1536 "device 0 live_bytes (512-byte units)"
is "$(num peak_bytes "$json" "$dev0")" 5632 "device 0 peak_bytes"
is "$(num leaked_allocations "$json" "$dev0")" 2 "device 0 leaked_allocations"
is "$(num leaked_bytes "$json" "$dev0")" 1536 "device 0 leaked_bytes"
is "$(num total_bytes "$json" "$dev0")" 17179869184 "device 0 total_bytes"
is "$(num cuMemAlloc_v2 "$json")" 3 "calls: cuMemAlloc_v2"
is "$(num cuGetProcAddress_v2 "$json")" 3 "calls: cuGetProcAddress_v2"
is "$(grep -c '"cuMemcpy"' "$json")" 0 "entry points never called are not listed"
is "$(num proc_address_queries "$json")" 3 "proc_address_queries"
is "$(num fakecuda_probe "$json")" 2 "proc_address_callers: 2 queries from the program"
is "$(num libfk_caller.so "$json")" 1 "proc_address_callers: 1 from libfk_caller.so"
is "$(num hazards "$json")" 1 "hazards: the claim while work was pending"
is "$(num pending_work "$json")" 0 "pending_work at exit"
is "$(num initialized "$json")" 1 "initialized"

json=$tmp/latency.json
start=$(date +%s%N)
p FAKECUDA_STATS="$json" FAKECUDA_LATENCY=cuMemAlloc_v2:20ms,cuMemFree_v2:300us,cuMemCreate:1ms \
  "$probe" init ctx alloc:1000 alloc:4096 free:1 >/dev/null
elapsed=$(($(date +%s%N) - start))
is "$(num driver_time_ns "$json")" 40300000 \
  "FAKECUDA_LATENCY: driver_time_ns sums the latencies of the calls made (2 x 20 ms + 300 us)"
is "$(sed -n '/"latency_ns"/,$p' "$json" | tr -d ' \n')" \
  '"latency_ns":{"cuMemAlloc_v2":40000000,"cuMemFree_v2":300000}}' \
  "... and latency_ns lists it per entry point called"
ok "$([ "$elapsed" -ge 40300000 ] && echo 0 || echo 1)" \
  "... and the calls spent it (the run took at least 40.3 ms: $elapsed ns)"
p FAKECUDA_STATS="$json" FAKECUDA_LATENCY=cuMemAlloc_v2:1000ms FAKECUDA_LATENCY_SLEEP=0 \
  "$probe" init ctx alloc:1000 alloc:4096 >/dev/null
is "$(num driver_time_ns "$json")" 2000000000 "FAKECUDA_LATENCY_SLEEP=0 charges the latency too"
p FAKECUDA_STATS="$json" FAKECUDA_MIGRATION=1us FAKECUDA_LATENCY_SLEEP=0 \
  "$probe" init ctx managed:65536 work:0 sync >/dev/null
is "$(num migration_ns "$json")/$(num driver_time_ns "$json")" 16000/16000 \
  "FAKECUDA_MIGRATION: 1 us per 4 KiB managed page migrated (16 pages), in the driver's time"
is "$(sed -n '/"latency_ns"/,$p' "$json" | tr -d ' \n')" '"latency_ns":{"cuCtxSynchronize":16000}}' \
  "... charged to the call that ran the kernel that touched them"

p FAKECUDA_STATS="$tmp/s.%p.json" "$probe" init ctx stale >/dev/null
set -- "$tmp"/s.*.json
is "$#" 1 "%p in FAKECUDA_STATS becomes the process id"
is "$(num stale_work "$1")" 1 "a free that overtakes pending work counts stale work"
is "$(num alloc_calls "$1" "$dev0")" 1 "cuMemAllocAsync counts as an allocation"
is "$(num free_calls "$1" "$dev0")" 1 "cuMemFreeAsync counts as a free"

out=$(p FAKECUDA_STATS="$tmp/f.%p.json" "$probe" init ctx alloc:512 fork forkcuda)
like "$out" "fork 0" "a forked child that never touches CUDA exits cleanly"
like "$out" "child 3" "a forked child's CUDA calls fail with CUDA_ERROR_NOT_INITIALIZED"
set -- "$tmp"/f.*.json
is "$#" 1 "only the parent writes the report"
is "$(num alloc_calls "$1" "$dev0")" 1 "... with the parent's numbers"
out=$(p "$probe" fork init ctx alloc:1 | tr "\n" " ")
like "$out" "fork 0.*init 0.*alloc 0" "fork before any CUDA call is harmless"

p FAKECUDA_STATS="$tmp/none.json" "$probe" version >/dev/null
is "$(num initialized "$tmp/none.json")" 0 "a report is written without cuInit too"
is "$(cat "$tmp/bad" 2>/dev/null)" "" "the probe always exited 0 with no sanitizer report"
done_testing

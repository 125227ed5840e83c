#!/usr/bin/env bash
# The out-of-memory report as a user reads it: one short block (what was asked, the verdict with
# its evidence, who holds the memory, what helps, where the full dump went), the pool's full
# dump only where GPUCAP_OOM_DUMP says; a device the program filled itself is not blamed on
# other processes; and one capped run's figures agree, under one name and in one size format,
# across the out-of-memory report, the exit report, the JSON and the plot.
. "$TOP/tests/integ/lib.sh"

GiB=$((1 << 30))
workload="$TESTBIN/workload"
machine="gpucap-oom-$$"
trap 'rm -f "/dev/shm/fakecuda.$(id -u).$machine"; rm -rf "$WORK"' EXIT

# The bundled workload under a 2 GiB cap (make demo's run): refused 1 GiB while it holds 1.5 GiB.
(cd "$WORK" && GPUCAP_MEMORY_LIMIT=2GiB GPUCAP_REPORT_JSON=run.json GPUCAP_TRACE=trace.csv \
  with_shim "$workload" >/dev/null 2>err)
err="$WORK/err"
block=$(sed -n '/^gpucap: out of memory on device 0 /,/^  full dump /p' "$err")
is "$(sed 's/(pid [0-9]*)/(pid N)/' <<<"$block")" "gpucap: out of memory on device 0 (pid N): 1.0 GiB (1073741824 bytes) refused
  verdict    cap_full: the cap is full of live allocations
  evidence   cap 2.0 GiB, pool 1.5 GiB, driver 401.0 MiB, in use 1.5 GiB; free under cap 111.0 MiB
  in use by  workload (program) 1.5 GiB
  helps      raise the cap (--limit, GPUCAP_MEMORY_LIMIT) or free memory
  full dump  GPUCAP_OOM_DUMP=stderr or =FILE writes the pool's bins and occupancy map" \
  "the first refusal: one block of six lines"
is "$(awk 'length > 99' <<<"$block")" "" "  every line under 100 columns"
is "$(grep -c -e '^Bin (' -e 'Occupancy' -e '^Stats:' "$err")" 0 "  no bins, map or stats unasked"
ok "$([ "$(wc -l <"$err")" -le 25 ]; echo $?)" \
  "  with the exit report, at most 25 lines of gpucap's on stderr ($(wc -l <"$err"))"

# One run, four views: the same figures under the same names, in the exit table's size format.
"$BUILD/gpucap" plot "$WORK/trace.csv" --json "$WORK/run.json" -o "$WORK/json.svg"
"$BUILD/gpucap" plot "$WORK/trace.csv" -o "$WORK/trace.svg"
is "$(python3 - "$err" "$WORK/run.json" "$WORK/json.svg" "$WORK/trace.svg" <<'PY'
import json, re, sys
err = open(sys.argv[1]).read()
rep = json.load(open(sys.argv[2]))
svgs = [open(p).read() for p in sys.argv[3:]]
bad = []
def same(what, *vals):
    if len(set(vals)) != 1:
        bad.append(f"{what}: {vals}")
def size(n):  # the exit table's format (report_format_size)
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    u = 0
    while u < 4 and n >> (10 * (u + 1)):
        u += 1
    if u == 0:
        return f"{n} B"
    whole, tenths = n >> (10 * u), ((n & ((1 << (10 * u)) - 1)) * 10 + (1 << (10 * u - 1))) >> (10 * u)
    if tenths == 10:
        whole, tenths = whole + 1, 0
    return f"{whole}.{tenths} {units[u]}"
ev = re.search(r"evidence   cap (\S+ \S+), pool (\S+ \S+), driver (\S+ \S+), in use (\S+ \S+);",
               err).groups()
ev = (ev[0], ev[1], ev[3], ev[2])  # cap, pool, in use, driver
drv = re.search(r"\n    driver's own memory \(nvml\) +(\S+ \S+)", err).group(1)
same("the driver's memory the cap counts", ev[3], drv)
asked = re.search(r"on device 0 \(pid \d+\): (\S+ \S+) \((\d+) bytes\) refused", err).groups()
table = re.search(r"\n +0 +(\S+ \S+) +(\S+ \S+) +(\S+ \S+) +(\S+ \S+) +(\S+ \S+) +(\S+ \S+)\n", err).groups()
acts = re.search(r"\n +0 +\S+ +\S+ \S+ +\S+ +(\d+) +(\d+) +(\d+) +(\d+)\n", err).groups()
lib = re.search(r"\n    workload \(program\) +(\S+ \S+) +(\S+ \S+)\n", err).groups()
d = rep["devices"][0]
u = rep["usage"][0]
for svg in svgs:
    head = re.search(r"peak pool (\S+ \S+) \xb7 peak in use (\S+ \S+) \xb7 peak requested \S+ \S+ "
                     r"\xb7 (\d+) refused \xb7 cap ([^<]+)</text>", svg).groups()
    same("cap", ev[0], table[4], size(d["cap_bytes"]), head[3])
    same("pool at the refusal (its peak)", ev[1], table[3], size(d["peak_pool_bytes"]), head[0])
    same("in use at the refusal (its peak)", ev[2], table[1], size(d["peak_bytes_in_use"]),
         head[1], lib[1], size(u["peak_held_bytes"]))
    same("refusals", "1", acts[3], str(d["num_ooms"]), str(u["refusals"]["cap_full"]), head[2])
    same("the refused request", asked[0], size(int(asked[1])),
         re.search(r">\+(\S+ \S+) cap_full</text>", svg).group(1))
same("driver allocations", acts[1], str(d["driver_alloc_calls"]))
same("allocations", acts[0], str(d["num_allocs"]))
same("in use at exit", table[0], size(d["bytes_in_use"]), lib[0], size(u["held_bytes"]))
texts = err + "".join(re.sub(r"<[^>]*>", " ", s) for s in svgs)
odd = re.findall(r"\d\.\d\d ?[KMGT]iB|\d[KMGT]iB|\d\.\d+ [KMGT]B\b", texts)
if odd:
    bad.append(f"sizes in another format: {sorted(set(odd))}")
print("; ".join(bad) or "agree")
PY
)" agree "one run: the out-of-memory report, the exit table, the JSON and the plots agree"

# The full dump where GPUCAP_OOM_DUMP says: after the block, or in a file (%p the pid), never
# with a line per empty bin; GPUCAP_REPORT=off prints nothing but still writes the file.
GPUCAP_MEMORY_LIMIT=2GiB GPUCAP_OOM_DUMP=stderr with_shim "$workload" >/dev/null 2>"$err"
is "$(grep -A 1 '^  full dump  below$' "$err" | tail -n 1)" \
  "gpucap: out of memory trying to allocate 1.0 GiB (1073741824 bytes, rounded to 1073741824); bin for the request: 20" \
  "GPUCAP_OOM_DUMP=stderr: the dump follows the block"
like "$(cat "$err")" 'Bin \(268435456\): 	Total Chunks: 3, Chunks in use: 3. 1.5 GiB allocated' \
  "  its bins, in the one size format"
is "$(grep -c 'Total Chunks: 0' "$err")" 0 "  no line for an empty bin"
is "$(grep -c -e '^Reserved:' -e '^DriverAllocs:' -e '^NumOOMs:' "$err")" 0 \
  "  no always-zero line, no counter the exit report counts otherwise"
GPUCAP_MEMORY_LIMIT=2GiB GPUCAP_OOM_DUMP="$WORK/dump.%p.txt" with_shim "$workload" \
  >/dev/null 2>"$err"
dump=$(ls "$WORK"/dump.*.txt 2>/dev/null)
like "$(cat "$err")" "  full dump  written to $dump" "GPUCAP_OOM_DUMP=FILE: the block names the file"
like "$(cat "$dump" 2>/dev/null)" '^gpucap: out of memory trying to allocate 1.0 GiB' "  which holds the dump"
is "$(grep -c '^Bin (' "$err")" 0 "  and stderr does not"
rm -f "$WORK"/dump.*.txt
GPUCAP_MEMORY_LIMIT=2GiB GPUCAP_REPORT=off GPUCAP_OOM_DUMP="$WORK/dump.%p.txt" \
  with_shim "$workload" >/dev/null 2>"$err"
is "$(cat "$err")" "" "GPUCAP_REPORT=off: nothing on stderr"
ok "$([ -s "$(ls "$WORK"/dump.*.txt 2>/dev/null | head -n 1)" ]; echo $?)" "  the dump file is still written"

# No cap, and the program fills the device itself: the verdict says so and blames no one else.
with_shim "$workload" >/dev/null 2>"$err"
is "$(grep -A 1 '^  verdict ' "$err")" \
  "  verdict    device_full: device 0 itself is full, and this process filled it
  evidence   cap none, pool 8.5 GiB, in use 8.5 GiB; no other process was seen holding it" \
  "a device the program filled: its own holdings are the evidence, and no cap"
like "$(cat "$err")" '  helps      the program needs more than the device has' "  and what helps"
is "$(grep -c 'other processes' "$err")" 0 "  other processes are not blamed"

# Another process (on the same fake machine) holds 12 GiB: then it is the others. The evidence
# adds the driver's own memory: two contexts of 401 MiB (the fake's model), 12.8 GiB in all.
mkfifo "$WORK/hold"
FAKECUDA_MACHINE="$machine" without_shim "$TESTBIN/fakecuda_probe" init ctx alloc:$((12 * GiB)) hold \
  <"$WORK/hold" >"$WORK/holder.out" 2>&1 &
holder=$!
exec 3>"$WORK/hold"
await "$WORK/holder.out" holding
FAKECUDA_MACHINE="$machine" with_shim "$workload" >/dev/null 2>"$err"
exec 3>&-
wait "$holder"
is "$(grep -A 1 '^  verdict ' "$err")" "  verdict    device_full: device 0 itself is full
  evidence   cap none, pool 2.5 GiB, in use 2.5 GiB; other processes and the driver hold 12.8 GiB" \
  "a device other processes fill: what they hold is the evidence"
like "$(cat "$err")" '  helps      run where the device has room' "  and what helps"
done_testing

#!/usr/bin/env bash
# The GPU kit's dry run (make test): `make gpu-check GPU_CHECK_DRIVER=fake`, the same kit that
# runs on a lent GPU (tests/gpu/check.sh), over the fake driver and NVML on one fake machine, with
# the watcher as its oracle; then its report, and proof that its checks can fail: with a library
# that caps nothing preloaded in gpucap's place the cap checks must fail, and a cap lowered below
# what a run held must fail the judge. Trimmed for time: the static runtime's rows only, one
# framework row, a shorter hold and invariant (`make gpu-check GPU_CHECK_DRIVER=fake` runs all).
# Last, `make gpu-bench GPU_CHECK_DRIVER=fake` with few calls, for its tables.
. "$TOP/tests/gpu/kit.sh"
. "$TOP/tests/reliability/rlib.sh"

out="$WORK/kit"
kit_run() {
  env GPU_CHECK_DRIVER=fake GPU_CHECK_KINDS=static GPU_CHECK_HOLD_MS=100 \
    GPU_CHECK_INVARIANT_OPS=500 GPU_CHECK_SKIP='framework (torch-async|torch-expandable|cupy-)' \
    "$@" bash "$TOP/tests/gpu/check.sh"
}

started=$(date +%s)
kit_run GPU_CHECK_OUT="$out" > "$WORK/kit.tap" 2> "$WORK/kit.err"
status=$?
relay "kit: " < "$WORK/kit.tap"
ok $? "the kit printed its checks"
is "$status" 0 "the kit passed over the fake driver ($(($(date +%s) - started)) s)"
[ "$status" = 0 ] || sed 's/^/# stderr: /' "$WORK/kit.err" | head -10

# ---- The report ----
json="$out/report.json"
md="$out/report.md"
if command -v python3 > /dev/null; then
  is "$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
m = r["machine"]
c = r["checks"]
s = r["summary"]
print(m["devices"][0]["name"], m["driver_version"], m["cuda_driver_version"], m["fake"],
      s["fail"], len(c) == s["pass"] + s["fail"] + s["skip"] + s["todo"],
      all(k in x for x in c for k in ("name", "status", "figures", "detail")))' "$json" 2>&1)" \
    "Fake CUDA Device 0 580.65.06 13000 True 0 True True" \
    "report.json: the GPU, the driver, CUDA, every check with its figures, nothing failed"
else
  skip "report.json parses" "no python3"
fi
grep -q '^| GPU 0 | Fake CUDA Device 0 (GPU-' "$md" && grep -q '^| driver | 580.65.06 ' "$md" &&
  grep -q '^| tolerance, device 0 | ' "$md" && grep -Eq '^\*\*[0-9]+ passed, 0 failed' "$md"
ok $? "report.md: the GPU, the driver, the tolerance, the summary"
like "$(grep -c '^| [0-9]* | ' "$md")" "^[1-9][0-9]{2,}$" "report.md: a row for every check"
for group in "hold" "malloc (static runtime)" "cublas (static runtime)" "invariant" \
  "capholes vmm" "threads (VMM pool)" "life fork" "framework torch-caching"; do
  grep -qF "\"name\": \"$group" "$json"
  ok $? "the report has checks of $group"
done

# ---- The mutation: nothing caps, and the kit must say so ----
mut="$WORK/nocap"
kit_run GPU_CHECK_OUT="$mut" GPU_CHECK_SHIM="$BUILD/tests/gpu/libnocap.so" \
  GPU_CHECK_ONLY='^(hold|row malloc|capholes vmm)$' > "$WORK/nocap.tap" 2>&1
is $? 1 "with a library that caps nothing in gpucap's place, the kit fails"
failed_checks=$(grep '"status": "fail"' "$mut/checks.jsonl" | sed 's/^{"name": "\([^"]*\)".*/\1/')
for want in "hold under gpucap: NVML's per-process figure within the cap (device 0)" \
  "hold under gpucap: the device's used memory, from a second process, within the cap (device 0)" \
  "malloc (static runtime): NVML's per-process figure within the cap (device 0)" \
  "malloc (static runtime): sees the device's memory bare and the cap under gpucap" \
  "capholes vmm: runs to its end, its own checks hold"; do
  printf '%s\n' "$failed_checks" | grep -qxF "$want"
  ok $? "uncapped, it fails: $want"
done
peak=$(grep -F "\"name\": \"malloc (static runtime): NVML's per-process figure" "$mut/checks.jsonl" |
  grep -o '"nvml_peak_bytes": [0-9]*' | sed 's/.*: //')
[ "${peak:-0}" -gt $((66 * MiB)) ]
ok $? "  the figure that failed it: NVML saw $(mib "${peak:-0}") of a 64 MiB cap"
grep -q '^## Failed' "$mut/report.md"
ok $? "  report.md lists the failures first"

# ---- The judge with a cap lowered below what the run held ----
kit_machine "$out/machine.json"
KIT_RECORDS="$WORK/lowered.jsonl"
: > "$KIT_RECORDS"
verdict=$(judge "hold, judged against 16 MiB" "$out/runs/hold/capped.json" 16MiB 1 1)
like "$verdict" "^not ok [0-9]+ - hold, judged against 16 MiB: NVML's per-process figure" \
  "a 64 MiB run judged against a 16 MiB cap fails on NVML's figure"
like "$verdict" "not ok [0-9]+ - hold, judged against 16 MiB: the device's used memory" \
  "  and on the device's"
verdict=$(judge "hold, judged against 64 MiB" "$out/runs/hold/capped.json" 64MiB 1 1)
unlike "$verdict" "not ok" "  the same run judged against its own cap passes"
# ---- gpu-bench over the fake: every table filled ----
GPU_CHECK_DRIVER=fake GPU_BENCH_OUT="$WORK/bench" GPU_BENCH_N=200 GPU_BENCH_RUNS=1 \
  GPU_CHECK_PYTHON=/nonexistent bash "$TOP/tests/gpu/bench.sh" > "$WORK/bench.out" 2>&1
is $? 0 "gpu-bench ran over the fake driver"
bench_md="$WORK/bench/bench.md"
like "$(grep -c '^| [0-9]* [KM]iB | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]* |$' "$bench_md")" \
  '^3$' "  the driver's pair against gpucap's pooled and pass-through pairs, at three sizes"
like "$(grep -c '^| [0-9]* MiB | \(bare\|capped\)\( | [0-9.]*\)\{7\} |$' "$bench_md")" '^4$' \
  "  every VMM step timed, bare and under gpucap, at two sizes"
grep -q '^| cuMemGetInfo_v2 | [0-9.]* | [0-9.]* | ' "$bench_md"
ok $? "  cuMemGetInfo_v2 bare and through its hook"
grep -Eq '^Spilled pair: (skipped: this gpucap has no spill setting|.* ns)' "$bench_md"
ok $? "  the spilled pair measured, or a line saying this gpucap has no spill setting"
grep -q '^PyTorch training step: skipped: no Python with torch' "$bench_md"
ok $? "  the training step skipped, saying why, without torch"
grep -q '"what":"vmm"' "$WORK/bench/bench.json"
ok $? "  bench.json holds the figures"
done_testing

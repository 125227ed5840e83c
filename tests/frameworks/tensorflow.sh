#!/usr/bin/env bash
# TensorFlow 2.21 with its CUDA 12 libraries from PyPI over the fake driver: each of its GPU
# memory strategies, without gpucap (a 4 GiB fake device) and under gpucap (a cap of 1 GiB;
# two devices of 1 GiB and 512 MiB for the per-device row). tests/frameworks/rows.sh says how a
# row is judged from outside; tf_workload.py checks from inside what TensorFlow makes of the
# memory it is shown: its memory limits, whether its allocator takes them up front, a matmul,
# how many 64 MiB tensors fit before its own ResourceExhaustedError, and going on.
#
# TensorFlow sizes its BFC allocator from cuMemGetInfo's free memory less a reserve of its own
# for the CUDA libraries (1800 MiB from 2 GiB up on a compute capability 9.0 device, 225 MiB
# below): 4096 - 1800 = 2296 MiB of the fake device, 1024 - 225 = 799 MiB of a 1 GiB cap.
# TF_DEVICE_MIN_SYS_MEMORY_IN_MB sets the reserve. docs/compatibility.md has the table.
. "$TOP/tests/integ/lib.sh"
. "$TOP/tests/frameworks/rows.sh"

rows_venv "${TENSORFLOW_VENV:-}" tf-default tf-growth-env tf-set-growth tf-memory-limit \
  tf-two-logical tf-fraction-0.5 tf-fraction-1.5 tf-fraction-1.5-spill tf-async tf-cuda-malloc \
  tf-two-devices tf-keras tf-memory-info tf-reserve
# TensorFlow loads the CUDA 12 libraries of its wheels by name.
LD_LIBRARY_PATH=$(printf '%s:' "$TENSORFLOW_VENV"/lib/python3*/site-packages/nvidia/*/lib)
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH%:}
ROWS_JOBS=4 # TensorFlow waits 10 s before it reports an allocation it cannot serve
# These rows are about TensorFlow's own limits and fills, figured on a device that costs nothing
# but the program's allocations; the driver's own memory is the PyTorch rows' and overhead.sh's.
export FAKECUDA_DRIVER_MEMORY=off
GiB=$((1 << 30))
case "${SAN_PRELOAD:-}" in
*libasan*)
  # Under ASan+UBSan (make test's second pass), one row per path TensorFlow takes into gpucap:
  # cuMemAlloc (the BFC allocator), the stream-ordered pools, managed memory, per-device caps.
  ROWS_ONLY=${ROWS_ONLY:-tf-default tf-async tf-fraction-1.5 tf-two-devices}
  ROWS_SKIP_WHY="its gpucap path runs under ASan in the other rows; the plain pass runs it"
  ;;
esac

# The default: the BFC allocator takes its whole limit at its first use.
row tf-default $GiB tf_workload.py "EXPECT_LIMIT_MIB=2296|799" EXPECT_UPFRONT=1 \
  "EXPECT_FILL=35|12" LIBRARY=libtensorflow_framework
# Growth: the same limit, taken as tensors need it.
row tf-growth-env $GiB tf_workload.py TF_FORCE_GPU_ALLOW_GROWTH=true "EXPECT_LIMIT_MIB=2296|799" \
  EXPECT_UPFRONT=0 "EXPECT_FILL=35|12"
row tf-set-growth $GiB tf_workload.py TF_GROWTH=api "EXPECT_LIMIT_MIB=2296|799" EXPECT_UPFRONT=0 \
  "EXPECT_FILL=35|12"
# One logical device with memory_limit, and two logical devices on one GPU.
row tf-memory-limit $GiB tf_workload.py TF_LOGICAL=512 EXPECT_LIMIT_MIB=512 EXPECT_UPFRONT=1 \
  EXPECT_FILL=7
row tf-two-logical $GiB tf_workload.py TF_LOGICAL=256,256 EXPECT_LIMIT_MIB=256,256 \
  EXPECT_UPFRONT=1 EXPECT_FILL=3,3
# per_process_gpu_memory_fraction is a fraction of the total cuMemGetInfo reports.
row tf-fraction-0.5 $GiB tf_workload.py TF_FRACTION=0.5 "EXPECT_LIMIT_MIB=2048|512" \
  EXPECT_UPFRONT=1 "EXPECT_FILL=31|7"
# Above 1 TensorFlow allocates unified (managed) memory beyond the card: 6 GiB on the 4 GiB
# device. Today's rule under gpucap: managed memory is charged to the cap, so the 1.5 GiB
# unified allocation is refused and TensorFlow shrinks it by tenths until one fits (1007 MiB);
# the cap is then full, cuBLAS cannot get its workspace, and a matmul raises InternalError.
row tf-fraction-1.5 $GiB tf_workload.py TF_FRACTION=1.5 "EXPECT_LIMIT_MIB=6144|1536" \
  EXPECT_UPFRONT=- "EXPECT_FILL=95|15" "EXPECT_MATMUL=ok|InternalError" \
  DRIVER_CALL=cuMemAllocManaged
# The same with a spill budget (GPUCAP_OVERSUBSCRIBE, GPUCAP_SPILL): TensorFlow's 1.5 GiB unified
# region is served whole, the part beyond the cap kept on the host, cuBLAS's workspace spilled
# too; the matmul runs, 23 tensors fit, and the device (managed pages included) never holds more
# than the cap. The report's figures are checked after the rows.
row tf-fraction-1.5-spill $GiB tf_workload.py TF_FRACTION=1.5 "EXPECT_LIMIT_MIB=6144|1536" \
  EXPECT_UPFRONT=- "EXPECT_FILL=95|23" DRIVER_CALL=cuMemAllocManaged \
  GPUCAP_OVERSUBSCRIBE=1GiB GPUCAP_SPILL=on
# The stream-ordered allocator (cuMemAllocAsync) does not keep to TensorFlow's limit: it fills
# the whole device without gpucap; under gpucap the cap stops it.
row tf-async $GiB tf_workload.py TF_GPU_ALLOCATOR=cuda_malloc_async "EXPECT_LIMIT_MIB=2296|799" \
  EXPECT_UPFRONT=0 "EXPECT_FILL=62|14" EXPECT_WITHIN=total DRIVER_CALL=cuMemAllocFromPoolAsync
# cuda_malloc: every tensor a cuMemAlloc, which gpucap's pool serves; TensorFlow states no
# limit (0 MB) and keeps no statistics; the device, or the cap, is the limit.
row tf-cuda-malloc $GiB tf_workload.py TF_GPU_ALLOCATOR=cuda_malloc EXPECT_LIMIT_MIB=0 \
  EXPECT_UPFRONT=0 "EXPECT_FILL=62|14" EXPECT_STATS=0 LIBRARY=libtensorflow_framework
# Two devices with caps of their own: TensorFlow sizes each from its cap.
row tf-two-devices $GiB,$((512 << 20)) tf_workload.py "EXPECT_LIMIT_MIB=2296,2296|799,287" \
  EXPECT_UPFRONT=1 "EXPECT_FILL=35,35|12,4"
# Keras: a batch too large raises ResourceExhaustedError, caught, and training goes on with half.
row tf-keras $GiB tf_workload.py TF_WORKLOAD=keras FAKECUDA_BACKING=1 \
  "EXPECT_LIMIT_MIB=2296|799" EXPECT_UPFRONT=1 EXPECT_HALVINGS=1
row tf-memory-info $GiB tf_workload.py TF_WORKLOAD=meminfo TF_FORCE_GPU_ALLOW_GROWTH=true \
  "EXPECT_LIMIT_MIB=2296|799" EXPECT_UPFRONT=0 "EXPECT_FILL=35|12"
# The reserve: 128 MiB leaves cuBLAS its 64 MiB workspace (with none, TensorFlow takes all the
# memory it is shown and the CUDA libraries it loads later have none).
row tf-reserve $GiB tf_workload.py TF_DEVICE_MIN_SYS_MEMORY_IN_MB=128 \
  "EXPECT_LIMIT_MIB=3968|896" EXPECT_UPFRONT=1 "EXPECT_FILL=61|13"
rows_run
# tf-fraction-1.5-spill's report: allocations spilled, at least the 512 MiB of the region beyond
# the cap and at most the budget, none refused for want of spill budget, and a right size that
# would have held the whole region.
report="$WORK/tf-fraction-1.5-spill.with.report.json"
if [ -f "$report" ]; then
  is "$("$py" - "$report" <<'EOF'
import json, sys
u = json.load(open(sys.argv[1]))["usage"][0]
MiB = 1 << 20
bad = []
if u["spilled_allocations"] < 1: bad.append(f"spilled_allocations {u['spilled_allocations']}")
if not 512 * MiB <= u["peak_spilled_bytes"] <= 1024 * MiB:
    bad.append(f"peak_spilled_bytes {u['peak_spilled_bytes']}")
if u["refusals"]["spill_full"] != 0: bad.append(f"spill_full {u['refusals']['spill_full']}")
if (u["right_size_bytes"] or 0) < 1536 * MiB: bad.append(f"right_size_bytes {u['right_size_bytes']}")
print("; ".join(bad) or "as spilled")
EOF
  )" "as spilled" "tf-fraction-1.5-spill, with gpucap: the report's spill figures"
fi
done_testing

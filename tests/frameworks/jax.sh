#!/usr/bin/env bash
# JAX 0.10.2 with its CUDA 13 plugin from PyPI over the fake driver: each of its allocator
# settings, without gpucap (a 4 GiB fake device) and under gpucap (a cap of 1 GiB).
# tests/frameworks/rows.sh says how a row is judged from outside; jax_workload.py checks from
# inside the device JAX finds, the limit its allocator takes (a fraction of the total
# cuMemGetInfo reports: 75 % by default), whether it takes it up front, a jitted training step,
# and how many 64 MiB arrays fit before its own RESOURCE_EXHAUSTED error, caught, then going on.
. "$TOP/tests/integ/lib.sh"
. "$TOP/tests/frameworks/rows.sh"

rows_venv "${JAX_VENV:-}" jax-default jax-no-prealloc jax-fraction jax-platform
export JAX_PLATFORMS=cuda # no quiet fall-back to the CPU
# These rows are about JAX's own limits and fills, figured on a device that costs nothing but
# the program's allocations; the driver's own memory is the PyTorch rows' and overhead.sh's.
export FAKECUDA_DRIVER_MEMORY=off
GiB=$((1 << 30))
case "${SAN_PRELOAD:-}" in
*libasan*)
  # Under ASan+UBSan (make test's second pass), one row per path JAX takes into gpucap:
  # cuMemAlloc (its BFC allocator) and VMM memory (the platform allocator).
  ROWS_ONLY=${ROWS_ONLY:-jax-default jax-platform}
  ROWS_SKIP_WHY="its gpucap path runs under ASan in the other rows; the plain pass runs it"
  ;;
esac

row jax-default $GiB jax_workload.py "EXPECT_LIMIT_MIB=3072|768" EXPECT_UPFRONT=1 \
  "EXPECT_FILL=47|11" LIBRARY=xla_cuda_plugin
row jax-no-prealloc $GiB jax_workload.py XLA_PYTHON_CLIENT_PREALLOCATE=false \
  "EXPECT_LIMIT_MIB=3072|768" EXPECT_UPFRONT=0 "EXPECT_FILL=46|10"
row jax-fraction $GiB jax_workload.py XLA_PYTHON_CLIENT_MEM_FRACTION=.9 \
  "EXPECT_LIMIT_MIB=3688|922" EXPECT_UPFRONT=1 "EXPECT_FILL=57|14"
# The platform allocator: VMM memory (cuMemCreate, cuMemMap) per buffer, charged to the cap.
row jax-platform $GiB jax_workload.py XLA_PYTHON_CLIENT_ALLOCATOR=platform \
  "EXPECT_LIMIT_MIB=4096|1024" EXPECT_UPFRONT=0 "EXPECT_FILL=61|13" DRIVER_CALL=cuMemCreate
rows_run
done_testing

# The kit for a real GPU (tests/gpu, docs/compatibility.md "Real GPUs"): `make gpu-check` proves
# the cap against the driver the loader finds (GPU_CHECK_DRIVER=real, the default: NVIDIA's
# libcuda.so.1; GPU_CHECK_DRIVER=fake: the fake driver and NVML in build/fakecuda), judged from
# outside by build/tests/gpu/gpuwatch, and writes its report (Markdown and JSON) under
# GPU_CHECK_OUT; `make gpu-bench` times the driver's calls against gpucap's through the hooks.
# tests/gpu/dryrun.sh runs the kit over the fake in every `make test`, so it cannot rot.
# tests/gpu/session.sh is the one command for a machine lent with a GPU.

GPU_DIR := tests/gpu
GPU_BIN := $(BUILD)/tests/gpu
GPU_TOOLS := $(GPU_BIN)/gpuwatch $(GPU_BIN)/gpuhold $(GPU_BIN)/libnocap.so
GPU_CHECK_DRIVER ?= real
GPU_CHECK_OUT ?= $(BUILD)/gpu-check
GPU_BENCH_OUT ?= $(BUILD)/gpu-bench

# The watcher loads both libraries with dlopen(): nothing linked.
$(GPU_BIN)/gpuwatch: private LINK_LIBS = -ldl
$(GPU_BIN)/gpuwatch: $(BUILD)/obj/$(GPU_DIR)/gpuwatch.o
	$(link)

$(GPU_BIN)/gpuhold: private LINK_LIBS = $(FAKECUDA_LIB)
$(GPU_BIN)/gpuhold: $(BUILD)/obj/$(GPU_DIR)/gpuhold.o $(FAKECUDA_LIB)
	$(link)

# The dry run's mutation: a library with nothing in it, preloaded in gpucap's place, so that every
# check that judges a cap must fail with it (the proof that the kit's checks can fail). It has no
# objects: its one input is an empty C file, /dev/null.
$(GPU_BIN)/libnocap.so: private LINK_LIBS = -x c /dev/null
$(GPU_BIN)/libnocap.so:
	$(link)

TEST_DEPS += $(GPU_TOOLS)
TEST_SCRIPTS += $(GPU_DIR)/dryrun.sh

.PHONY: gpu-check gpu-bench
gpu-check: all
	$(Q)env $(TEST_ENV) GPU_CHECK_DRIVER=$(GPU_CHECK_DRIVER) \
	  GPU_CHECK_OUT=$(abspath $(GPU_CHECK_OUT)) bash $(GPU_DIR)/check.sh

gpu-bench: all
	$(Q)env $(TEST_ENV) GPU_CHECK_DRIVER=$(GPU_CHECK_DRIVER) \
	  GPU_BENCH_OUT=$(abspath $(GPU_BENCH_OUT)) bash $(GPU_DIR)/bench.sh

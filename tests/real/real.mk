# Real programs (tests/real): ordinary CUDA programs built by nvcc against NVIDIA's runtime, run
# by tests/real/real.sh and tests/real/libs.sh over the fake driver with and without gpucap.
# Each .cu is compiled once and linked twice: against the static runtime (nvcc's default) and
# the shared one (-cudart shared). Needs a CUDA toolkit: NVCC (default: $CUDA_HOME/bin/nvcc, or
# nvcc on PATH); without one nothing is built and the scripts skip their rows, saying why.
# gpucap itself never needs any of this.

ifeq ($(origin NVCC),undefined)
  NVCC := $(if $(CUDA_HOME),$(wildcard $(CUDA_HOME)/bin/nvcc),$(shell command -v nvcc 2>/dev/null))
endif

REAL_DIR := tests/real
REAL_OUT := $(BUILD)/real
REAL_ARCH := sm_90
REAL_FAMILIES := malloc pitch async managed host arrays meminfo ptrattr ipc reset devices \
                 threads fork oom kernel mixed graphs
REAL_LIBRARIES := cublas cufft curand cudnn nccl

ifneq ($(NVCC),)
REAL_CUDA := $(abspath $(dir $(NVCC))..)
REAL_LIBDIR := $(firstword $(wildcard $(REAL_CUDA)/lib64 $(REAL_CUDA)/lib))
# A library's program is built only where its header is installed (cuDNN ships separately).
REAL_HEADER_cublas := cublas_v2.h
REAL_HEADER_cufft := cufft.h
REAL_HEADER_curand := curand.h
REAL_HEADER_cudnn := cudnn.h
REAL_HEADER_nccl := nccl.h
REAL_BUILT := $(REAL_FAMILIES) \
              $(foreach l,$(REAL_LIBRARIES),$(if $(wildcard $(REAL_CUDA)/include/$(REAL_HEADER_$(l))),$(l)))
REAL_BINS := $(foreach f,$(REAL_BUILT),$(REAL_OUT)/$(f)_static $(REAL_OUT)/$(f)_shared)
TEST_DEPS += $(REAL_BINS)

REAL_NVFLAGS := -arch=$(REAL_ARCH) -I.
REAL_NVFLAGS_threads := --default-stream per-thread
REAL_LDLIBS_cublas := -lcublas
REAL_LDLIBS_cufft := -lcufft
REAL_LDLIBS_curand := -lcurand
REAL_LDLIBS_cudnn := -lcudnn
REAL_LDLIBS_nccl := -lnccl
REAL_RPATH := -Xlinker -rpath -Xlinker $(REAL_LIBDIR)

$(REAL_OUT)/%.o: $(REAL_DIR)/%.cu $(REAL_DIR)/real.h
	$(call say,NVCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(NVCC) $(REAL_NVFLAGS) $(REAL_NVFLAGS_$*) -c $< -o $@

$(REAL_OUT)/%_static: $(REAL_OUT)/%.o
	$(call say,NVLD,$@)
	$(Q)$(NVCC) -arch=$(REAL_ARCH) $< -o $@ $(REAL_RPATH) $(REAL_LDLIBS_$*) -lpthread

$(REAL_OUT)/%_shared: $(REAL_OUT)/%.o
	$(call say,NVLD,$@)
	$(Q)$(NVCC) -arch=$(REAL_ARCH) -cudart shared $< -o $@ $(REAL_RPATH) $(REAL_LDLIBS_$*) \
	  -lpthread

.SECONDARY: $(foreach f,$(REAL_BUILT),$(REAL_OUT)/$(f).o)
endif

TEST_SCRIPTS += $(REAL_DIR)/real.sh $(REAL_DIR)/libs.sh
THREAD_TESTS += $(REAL_DIR)/threads.sh

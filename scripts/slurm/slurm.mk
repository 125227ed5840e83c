# The Slurm SPANK plug-in: $(BUILD)/gpucap_spank.so, built when Slurm's headers are installed
# (<slurm/spank.h>: Debian's libslurm-dev; SLURM_INCLUDE names another include directory).
# `make install` puts it beside the library, $(LIBDIR)/gpucap_spank.so, where it finds
# libgpucap.so by default; plugstack.conf names it (docs/cluster.md). It links the settings
# parsers (config/), the LD_PRELOAD composer of gpucap run (scripts/preload.c) and the budget's
# budget file path (shim/accounting/budget.c); Slurm's own functions come from the srun, sbatch or slurmstepd
# that loads it. The share arithmetic (jobcap.c) needs no Slurm: its unit test always runs.

SLURM_INCLUDE ?= /usr/include
JOBCAP_OBJ := $(BUILD)/obj/scripts/slurm/jobcap.o

$(BUILD)/tests/test_jobcap: $(BUILD)/obj/tests/unit/test_jobcap.o $(JOBCAP_OBJ) $(CONFIG_OBJS)
	$(link)
TEST_PROGRAMS += $(BUILD)/tests/test_jobcap

SPANK_PLUGIN :=
ifneq ($(wildcard $(SLURM_INCLUDE)/slurm/spank.h),)
SPANK_PLUGIN := $(BUILD)/gpucap_spank.so
SPANK_MAP := scripts/slurm/gpucap_spank.map
PROGRAMS += $(SPANK_PLUGIN)

# Slurm finds the plug-in's entry points and SPANK_PLUGIN's variables by name: default visibility
# here, and the version script keeps everything else inside.
$(BUILD)/obj/scripts/slurm/gpucap_spank.o: ALL_CFLAGS += -isystem $(SLURM_INCLUDE) -fvisibility=default

# In a sanitizer build the plug-in is instrumented too, and Slurm's (uninstrumented) daemons
# cannot load it: the Slurm test (tests/cluster/slurm.sh) runs in the plain build only.
SPANK_OBJS := $(BUILD)/obj/scripts/slurm/gpucap_spank.o $(JOBCAP_OBJ) \
              $(BUILD)/obj/config/parse.o $(BUILD)/obj/config/cfg.o \
              $(BUILD)/obj/scripts/preload.o $(BUILD)/obj/shim/accounting/budget.o
$(SPANK_PLUGIN): private LINK_LIBS = -Wl,--version-script=$(SPANK_MAP) -Wl,-z,now -Wl,-z,relro \
  -ldl -lpthread
$(SPANK_PLUGIN): $(SPANK_OBJS) $(SPANK_MAP)
	$(link)

install: $(SPANK_PLUGIN) # installed by scripts/scripts.mk's install, beside the library
endif

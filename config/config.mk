# config module: the settings table (options.def), their parsers and cfg_load.
#
# CONFIG_OBJS is what the shim and the gpucap CLI link; test_config checks every accepted
# form and every rejection class of every setting, plus the fail-closed rules.

CONFIG_OBJS := $(BUILD)/obj/config/parse.o $(BUILD)/obj/config/cfg.o $(BUILD)/obj/config/unknown.o

CONFIG_TESTS := $(BUILD)/tests/test_config

$(BUILD)/tests/test_config: $(BUILD)/obj/tests/unit/test_config.o $(CONFIG_OBJS)
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS)

# `make $PWD/build/tests/test_config` names the same file by its absolute path.
ifneq ($(abspath $(CONFIG_TESTS)),$(CONFIG_TESTS))
$(abspath $(CONFIG_TESTS)): $(CONFIG_TESTS)
endif

TEST_PROGRAMS += $(CONFIG_TESTS)

# Builds the Pin tool parlot.cpp with Pin's own make system (needs a Pin 3.x kit):
#   make -C pin pintool PIN_ROOT=/path/to/pin      -> pin/build/obj-intel64/parlot.so
# (Pin cannot be downloaded where this project is developed; the tests do not build this.)
ifndef PIN_ROOT
$(error set PIN_ROOT to the root of a Pin 3.x kit)
endif
CONFIG_ROOT := $(PIN_ROOT)/source/tools/Config
include $(CONFIG_ROOT)/makefile.config

TEST_TOOL_ROOTS := parlot
TOOL_CXXFLAGS += -I$(CURDIR)

include $(TOOLS_ROOT)/Config/makefile.default.rules

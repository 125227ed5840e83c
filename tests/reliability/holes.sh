# The ways past the cap that tests/reliability/capholes.c tries, one scenario a line, sourced by
# tests/reliability/capholes.sh (over the fake driver, judged by its per-device peak) and
# tests/gpu/check.sh (on the driver at hand, judged by NVML and cuMemGetInfo):
#   scenario NAME CAP0 CAP1 [VAR=VALUE...]
# CAP0 and CAP1: the bytes devices 0 and 1 may hold at most ('-': not judged); VAR=VALUE: the
# run's settings.
hole_scenarios() {
  local cap=$((64 << 20))
  scenario vmm $cap $cap GPUCAP_MEMORY_LIMIT=64MiB
  scenario vmm-retain $cap $cap GPUCAP_MEMORY_LIMIT=64MiB
  scenario vmm-self-import $cap $cap GPUCAP_MEMORY_LIMIT=64MiB
  scenario pool-device - $cap GPUCAP_MEMORY_LIMIT=1:64MiB
  scenario stream-device - $cap GPUCAP_MEMORY_LIMIT=1:64MiB
  scenario no-context $cap $cap GPUCAP_MEMORY_LIMIT=64MiB
  scenario ctx-destroy $cap $cap GPUCAP_MEMORY_LIMIT=64MiB
  scenario primary-reset $cap $cap GPUCAP_MEMORY_LIMIT=64MiB
  scenario pending-free $cap $cap GPUCAP_MEMORY_LIMIT=64MiB
  scenario pitch $cap $cap GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_POOL=off
  scenario getinfo-v1 - - GPUCAP_MEMORY_FRACTION=0.5
  scenario double-free $cap $cap GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_POOL=off
}

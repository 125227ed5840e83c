#!/usr/bin/env bats
# What gpucap run and the library say about a run, checked from outside.

load helpers

# ---- GPUCAP_VERBOSE=1 names the driver it adopted ----

@test "GPUCAP_VERBOSE=1 says which driver was adopted; 0 says nothing of it" {
  run --separate-stderr grun_leaks --quiet --limit 2GiB -- "$WORKLOAD"
  [[ "$stderr" != *"driver adopted"* ]]
  export GPUCAP_VERBOSE=1
  run --separate-stderr grun_leaks --quiet --limit 2GiB -- "$WORKLOAD"
  status_is 0
  err_has "gpucap: driver adopted: $FAKE_DIR/libcuda.so.1"
}

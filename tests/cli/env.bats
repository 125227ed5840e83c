#!/usr/bin/env bats
# gpucap env: the settings a run would have, each with its value and where it came from
# (option, environment, TF_FORCE_GPU_ALLOW_GROWTH, default), and the library run would preload.

load helpers

# line VAR: the line of $output for VAR, blanks squeezed.
line() {
  grep "^$1 " <<<"$output" | tr -s ' '
}

@test "with nothing set: every setting at its default, and the library next to gpucap" {
  run --separate-stderr "$GPUCAP" env
  status_is 0
  [ -z "$stderr" ]
  [ "$(line GPUCAP_MEMORY_LIMIT)" = "GPUCAP_MEMORY_LIMIT (unset) default" ]
  [ "$(line GPUCAP_ALLOW_GROWTH)" = "GPUCAP_ALLOW_GROWTH true default" ]
  [ "$(line GPUCAP_POOL)" = "GPUCAP_POOL on default" ]
  [ "$(line GPUCAP_REPORT)" = "GPUCAP_REPORT stderr default" ]
  [ "$(line GPUCAP_VERBOSE)" = "GPUCAP_VERBOSE 0 default" ]
  [ "$(line GPUCAP_LIB)" = "GPUCAP_LIB $LIB default (next to gpucap)" ]
}

@test "every setting of the options table is listed, in its order" {
  run "$GPUCAP" env
  want=$(sed -n 's/^CFG_OPT(\([A-Z_]*\),.*/GPUCAP_\1/p' "$TOP/config/options.def")
  got=$(sed '/^GPUCAP_LIB /q' <<<"$output" | awk '{print $1}' | grep -v '^GPUCAP_LIB$')
  [ "$got" = "$want" ]
}

@test "values from the environment, in canonical form" {
  export GPUCAP_MEMORY_LIMIT=1073741824 GPUCAP_MEMORY_FRACTION=0:.5 GPUCAP_POOL=OFF
  run "$GPUCAP" env
  status_is 0
  [ "$(line GPUCAP_MEMORY_LIMIT)" = "GPUCAP_MEMORY_LIMIT 1GiB environment" ]
  [ "$(line GPUCAP_MEMORY_FRACTION)" = "GPUCAP_MEMORY_FRACTION 0:0.5 environment" ]
  [ "$(line GPUCAP_POOL)" = "GPUCAP_POOL off environment" ]
}

@test "values from options, which override the environment" {
  export GPUCAP_MEMORY_LIMIT=1GiB
  run "$GPUCAP" env --limit 8GiB --quiet --json ./r.json --device-limit=
  status_is 0
  [ "$(line GPUCAP_MEMORY_LIMIT)" = \
    "GPUCAP_MEMORY_LIMIT (unset) default (option --device-limit unset it)" ]
  run "$GPUCAP" env --limit 8GiB --quiet --json ./r.json --preallocate
  status_is 0
  [ "$(line GPUCAP_MEMORY_LIMIT)" = "GPUCAP_MEMORY_LIMIT 8GiB option --limit" ]
  [ "$(line GPUCAP_REPORT)" = "GPUCAP_REPORT off option --quiet" ]
  [ "$(line GPUCAP_REPORT_JSON)" = "GPUCAP_REPORT_JSON ./r.json option --json" ]
  [ "$(line GPUCAP_ALLOW_GROWTH)" = "GPUCAP_ALLOW_GROWTH false option --preallocate" ]
  run "$GPUCAP" env --device-limit 1=2GiB,0=1GiB --trace ./t.csv --report ./r.txt --growth \
    --fraction 0.5
  [ "$(line GPUCAP_MEMORY_LIMIT)" = "GPUCAP_MEMORY_LIMIT 0:1GiB,1:2GiB option --device-limit" ]
  [ "$(line GPUCAP_MEMORY_FRACTION)" = "GPUCAP_MEMORY_FRACTION 0.5 option --fraction" ]
  [ "$(line GPUCAP_TRACE)" = "GPUCAP_TRACE ./t.csv option --trace" ]
  [ "$(line GPUCAP_REPORT)" = "GPUCAP_REPORT ./r.txt option --report" ]
  [ "$(line GPUCAP_ALLOW_GROWTH)" = "GPUCAP_ALLOW_GROWTH true option --growth" ]
}

@test "TF_FORCE_GPU_ALLOW_GROWTH is shown as the source when it decides" {
  export TF_FORCE_GPU_ALLOW_GROWTH=false
  run "$GPUCAP" env
  [ "$(line GPUCAP_ALLOW_GROWTH)" = "GPUCAP_ALLOW_GROWTH false TF_FORCE_GPU_ALLOW_GROWTH" ]
}

@test "a TF_FORCE_GPU_ALLOW_GROWTH the library ignores: its warning, exit 0" {
  export TF_FORCE_GPU_ALLOW_GROWTH=True
  run --separate-stderr "$GPUCAP" env
  status_is 0
  err_has "gpucap: warning: TF_FORCE_GPU_ALLOW_GROWTH='True' is ignored"
  [ "$(line GPUCAP_ALLOW_GROWTH)" = "GPUCAP_ALLOW_GROWTH true default" ]
}

@test "an invalid setting: shown as (invalid), the library's message, exit 125" {
  export GPUCAP_VERBOSE=4
  run --separate-stderr "$GPUCAP" env
  status_is 125
  [ "$(line GPUCAP_VERBOSE)" = "GPUCAP_VERBOSE (invalid) environment" ]
  err_has "gpucap: error: GPUCAP_VERBOSE='4'"
  err_has "GPUCAP_VERBOSE comes from the environment"
  run --separate-stderr "$GPUCAP" env --fraction 2
  status_is 125
  [ "$(line GPUCAP_MEMORY_FRACTION)" = "GPUCAP_MEMORY_FRACTION (invalid) option --fraction" ]
  err_has "GPUCAP_MEMORY_FRACTION comes from --fraction F"
}

@test "GPUCAP_LIB: shown from the environment, or (not found) with a warning" {
  run env GPUCAP_LIB="$BUILD/libgpucap.so" "$GPUCAP" env
  status_is 0
  [ "$(line GPUCAP_LIB)" = "GPUCAP_LIB $LIB environment" ]
  run --separate-stderr env GPUCAP_LIB=/nonexistent.so "$GPUCAP" env
  status_is 0
  [ "$(line GPUCAP_LIB)" = "GPUCAP_LIB (not found) environment" ]
  err_has "gpucap: warning: env: GPUCAP_LIB='/nonexistent.so'"
}

@test "a misspelled GPUCAP_ variable: listed settings, the error naming the setting, exit 125" {
  export GPUCAP_REPORTJSON=./r.json
  run --separate-stderr "$GPUCAP" env
  status_is 125
  err_has "gpucap: error: GPUCAP_REPORTJSON is not a gpucap setting (did you mean GPUCAP_REPORT_JSON?)"
  [ "$(line GPUCAP_REPORT_JSON)" = "GPUCAP_REPORT_JSON (unset) default" ]
}

@test "the caps the cluster set: each source, and a bad one refused like a bad setting" {
  export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G
  run --separate-stderr env LD_LIBRARY_PATH="$FAKE_DIR" "$GPUCAP" env
  status_is 0
  has "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT='0=1G'  limit, held by the MPS server"
  has "device 0 (0000:01:00.0, 16GiB): cap 1GiB from CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (the line"
  run --separate-stderr env LD_LIBRARY_PATH="$FAKE_DIR" GPUCAP_CAP_COVERS=allocations "$GPUCAP" env
  has "device 0 (0000:01:00.0, 16GiB): cap 768MiB from CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (1GiB less"
  run --separate-stderr "$GPUCAP" env
  has "(the devices are unknown here: no CUDA driver can be loaded)"
  export GPU_MEMORY_LIMIT=lots
  run --separate-stderr "$GPUCAP" env
  status_is 125
  has "GPU_MEMORY_LIMIT='lots'  invalid: ignored"
  err_has "gpucap: error: GPU_MEMORY_LIMIT='lots'"
  run --separate-stderr env GPUCAP_DISCOVER=off "$GPUCAP" env
  status_is 0
  hasnt "CUDA_MPS_PINNED"
}

@test "usage errors (2): arguments, '--', unknown options; --help and --version" {
  run --separate-stderr "$GPUCAP" env extra
  status_is 2
  err_has "env: unexpected argument 'extra'; see gpucap env --help"
  run --separate-stderr "$GPUCAP" env --
  status_is 2
  err_has "env: unknown option '--'"
  run --separate-stderr "$GPUCAP" env --bogus
  status_is 2
  err_has "env: unknown option '--bogus'"
  run "$GPUCAP" env --help
  status_is 0
  has "Usage: gpucap env [OPTIONS]"
  has "--device-limit LIST"
  run "$GPUCAP" env --version
  status_is 0
  [[ "$output" =~ ^gpucap\ [0-9.]+$ ]]
}

@test "docs/configuration.md documents every variable gpucap env lists" {
  export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G SLURM_SHARD_MEM_PER_GPU=0000:01:00.0=1024M \
    NVIDIA_GPU_MEMORY_LIMIT=1024 NVIDIA_GPU_MEMORY_REQUEST=512 CUDA_DEVICE_MEMORY_LIMIT=1g \
    CUDA_DEVICE_MEMORY_LIMIT_0=1g GPU_MEMORY_LIMIT=1073741824
  run "$GPUCAP" env
  status_is 0
  for v in $(sed '/^GPUCAP_LIB /q' <<<"$output" | awk '{print $1}') \
    $(sed -n "s/^  \([A-Z_0-9]*\)='.*/\1/p" <<<"$output" | sed 's/_0$/_<i>/'); do
    grep -q "\`$v\`" "$TOP/docs/configuration.md"
  done
}

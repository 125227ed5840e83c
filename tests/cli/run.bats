#!/usr/bin/env bats
# gpucap run: every option sets its variable and overrides the environment; every setting is
# checked by the shim's parser before anything starts (exit 2, the shim's message); the command
# is exec'ed with the library in front of LD_PRELOAD, keeping its status, signals and output.

load helpers

# ---- The capped run ----

@test "run caps the workload, which sees the cap and is reported at exit" {
  run --separate-stderr grun_leaks --limit 2GiB -- "$WORKLOAD"
  status_is 0
  has "cuMemGetInfo -> 0: total     2048 MiB"
  has "activations  1024 MiB -> CUDA_ERROR_OUT_OF_MEMORY"
  err_has "gpucap: memory report (pid "
  err_has "     2.0 GiB"
}

@test "the same workload without gpucap sees the whole fake device" {
  run env LD_LIBRARY_PATH="$FAKE_DIR" "$WORKLOAD"
  status_is 0
  has "total    16384 MiB"
}

@test "--limit=SIZE works like --limit SIZE" {
  run --separate-stderr grun_leaks --limit=1GiB -- "$WORKLOAD"
  status_is 0
  has "total     1024 MiB"
}

@test "--fraction caps at a share of the device" {
  run --separate-stderr grun_leaks --fraction 0.25 -- "$WORKLOAD"
  status_is 0
  has "total     4096 MiB"
}

@test "--device-limit caps one device" {
  run --separate-stderr grun_leaks --device-limit 0=3GiB -- "$WORKLOAD"
  status_is 0
  has "total     3072 MiB"
}

@test "--preallocate reserves the cap at once; --growth grows by regions" {
  grun_leaks --preallocate --limit 2GiB --json ./pre.json --quiet -- "$WORKLOAD" >/dev/null
  grun_leaks --growth --limit 2GiB --json ./grow.json --quiet -- "$WORKLOAD" >/dev/null
  grep -q '"driver_alloc_calls": 1,' pre.json
  grep -q '"driver_alloc_calls": 2,' grow.json
}

@test "--quiet: no exit report on stderr, and --json still writes" {
  run --separate-stderr grun_leaks --quiet --json ./r.json --limit 2GiB -- "$WORKLOAD"
  status_is 0
  [[ "$stderr" != *"memory report"* ]]
  grep -q '"cap_bytes": 2147483648' r.json
}

@test "--report PATH writes the table there instead of stderr" {
  run --separate-stderr grun_leaks --report ./table.txt --limit 2GiB -- "$WORKLOAD"
  status_is 0
  [[ "$stderr" != *"memory report ("* ]]
  grep -q '^gpucap: memory report (pid ' table.txt
}

@test "--trace PATH writes the RMM trace" {
  grun_leaks --trace ./t.csv --quiet --limit 2GiB -- "$WORKLOAD" >/dev/null 2>&1
  [ "$(head -n 1 t.csv)" = "Thread,Time,Action,Pointer,Size,Stream" ]
  [ "$(grep -c ',allocate,' t.csv)" -eq 3 ]
  [ "$(grep -c ',allocate failure,0,1073741824,' t.csv)" -eq 1 ]
}

# ---- Options become variables; options override the environment ----

@test "each option sets its variable" {
  run --separate-stderr grun --limit 4GiB --fraction 0.5 --growth --report ./r.txt \
    --json ./j.json --trace ./t.csv -- sh -c 'env | grep "^GPUCAP_" | sort'
  status_is 0
  [ "$output" = "GPUCAP_ALLOW_GROWTH=true
GPUCAP_MEMORY_FRACTION=0.5
GPUCAP_MEMORY_LIMIT=4GiB
GPUCAP_REPORT=./r.txt
GPUCAP_REPORT_JSON=./j.json
GPUCAP_TRACE=./t.csv" ]
}

@test "--preallocate and --quiet set false and off" {
  run grun --preallocate --quiet -- sh -c 'echo "$GPUCAP_ALLOW_GROWTH $GPUCAP_REPORT"'
  [ "$output" = "false off" ]
}

@test "--device-limit 0=SIZE,1=SIZE becomes 0:SIZE,1:SIZE; repeated, the lists join" {
  run grun --device-limit 0=1GiB,1=2GiB -- sh -c 'echo "$GPUCAP_MEMORY_LIMIT"'
  [ "$output" = "0:1GiB,1:2GiB" ]
  run grun --device-limit 0=1GiB --device-limit '1 = 2GiB' -- sh -c 'echo "$GPUCAP_MEMORY_LIMIT"'
  [ "$output" = "0:1GiB,1 : 2GiB" ]
}

@test "options override the environment" {
  export GPUCAP_MEMORY_LIMIT=1GiB GPUCAP_REPORT=off
  run grun --limit 4GiB --report stderr -- sh -c 'echo "$GPUCAP_MEMORY_LIMIT $GPUCAP_REPORT"'
  [ "$output" = "4GiB stderr" ]
}

@test "settings without an option pass through from the environment" {
  export GPUCAP_POOL=off GPUCAP_VERBOSE=0
  run grun -- sh -c 'echo "$GPUCAP_POOL $GPUCAP_VERBOSE"'
  [ "$output" = "off 0" ]
}

@test "a valid environment setting is kept when another option is given" {
  export GPUCAP_MEMORY_FRACTION=0.5
  run grun --limit 1GiB -- sh -c 'echo "$GPUCAP_MEMORY_FRACTION"'
  [ "$output" = "0.5" ]
}

# ---- exec: output, status, signals, process ----

@test "the command's exit status is kept" {
  run grun -- sh -c 'exit 7'
  status_is 7
  run grun -- false
  status_is 1
}

@test "a signal that kills the command is seen by the caller" {
  run grun -- sh -c 'kill -TERM $$'
  status_is 143
}

@test "gpucap execs: the command has gpucap's process ID" {
  run env LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$(preload_env)" ASAN_OPTIONS=detect_leaks=0 \
    GPUCAP="$GPUCAP" sh -c 'echo $$; exec "$GPUCAP" run -- sh -c "echo \$\$"'
  status_is 0
  [ "${lines[0]}" = "${lines[1]}" ]
}

@test "nothing is printed but the command's output: stdin, stdout and stderr pass through" {
  run --separate-stderr grun --limit 1GiB -- sh -c 'cat; echo err >&2'  <<<"hello"
  status_is 0
  [ "$output" = "hello" ]
  [ "$stderr" = "err" ]
}

@test "arguments reach the command unchanged, '--' and options included" {
  run grun -- printf '[%s]' -- --limit '' 'a b'
  [ "$output" = "[--][--limit][][a b]" ]
}

# ---- LD_PRELOAD ----

@test "the library is put in front of LD_PRELOAD, keeping what is there" {
  run --separate-stderr env LD_PRELOAD="$(preload_env)${SAN_PRELOAD:+:}/nonexistent/liba.so" \
    ASAN_OPTIONS=detect_leaks=0 "$GPUCAP" run -- sh -c 'printf %s "$LD_PRELOAD"'
  status_is 0
  [ "$output" = "${SAN_PRELOAD:+$SAN_PRELOAD:}$LIB:/nonexistent/liba.so" ]
}

@test "the library is loaded into the command" {
  run grun -- sh -c 'cat /proc/$$/maps'
  has "$LIB"
}

@test "run inside run preloads the library once" {
  run grun -- "$GPUCAP" run -- sh -c 'printf %s "$LD_PRELOAD"'
  status_is 0
  [ "$(grep -o libgpucap.so <<<"$output" | wc -l)" -eq 1 ]
}

@test "another libgpucap.so in LD_PRELOAD is refused" {
  mkdir other && cp "$LIB" other/libgpucap.so
  run --separate-stderr env LD_PRELOAD="$(preload_env)${SAN_PRELOAD:+:}$SCRATCH/other/libgpucap.so" \
    ASAN_OPTIONS=detect_leaks=0 "$GPUCAP" run -- true
  status_is 2
  err_has "LD_PRELOAD already loads another gpucap library"
}

@test "GPUCAP_LIB names the library to preload" {
  mkdir lib && cp "$LIB" lib/libgpucap.so
  run env GPUCAP_LIB="$SCRATCH/lib/libgpucap.so" LD_PRELOAD="$(preload_env)" \
    ASAN_OPTIONS=detect_leaks=0 "$GPUCAP" run -- sh -c 'printf %s "$LD_PRELOAD"'
  status_is 0
  [[ "$output" == *"$SCRATCH/lib/libgpucap.so" ]]
}

@test "a GPUCAP_LIB that does not exist stops the run" {
  run --separate-stderr env GPUCAP_LIB=/nonexistent/libgpucap.so "$GPUCAP" run -- touch ran
  status_is 2
  err_has "gpucap: error: run: GPUCAP_LIB='/nonexistent/libgpucap.so': No such file or directory"
  [ ! -e ran ]
}

# ---- Bad settings: the shim's message, exit 2, nothing started ----

@test "a bad option value: the shim's message, where it came from, exit 2, nothing run" {
  run --separate-stderr grun --limit 1GB -- touch ran
  status_is 2
  err_has "gpucap: error: GPUCAP_MEMORY_LIMIT='1GB': 'GB' is ambiguous"
  err_has "did you mean '1GiB'?"
  err_has "GPUCAP_MEMORY_LIMIT comes from --limit SIZE"
  [ ! -e ran ]
  [ -z "$output" ]
}

@test "a bad environment setting stops the run too, naming the variable" {
  export GPUCAP_POOL=of
  run --separate-stderr grun -- touch ran
  status_is 2
  err_has "gpucap: error: GPUCAP_POOL='of'"
  err_has "GPUCAP_POOL comes from the environment: correct it or unset it"
  [ ! -e ran ]
}

@test "an empty setting in the environment is an error, not unset" {
  export GPUCAP_MEMORY_FRACTION=
  run --separate-stderr grun -- true
  status_is 2
  err_has "GPUCAP_MEMORY_FRACTION=''"
}

@test "a bad option value is reported even when the environment has a good one" {
  export GPUCAP_MEMORY_FRACTION=0.5
  run --separate-stderr grun --fraction 50% -- true
  status_is 2
  err_has "GPUCAP_MEMORY_FRACTION='50%'"
  err_has "comes from --fraction F"
}

@test "an option overriding a bad environment value makes the run valid" {
  export GPUCAP_MEMORY_LIMIT=garbage
  run grun --limit 1GiB -- sh -c 'echo "$GPUCAP_MEMORY_LIMIT"'
  status_is 0
  [ "$output" = "1GiB" ]
}

@test "a report path without '/' is refused with the fix" {
  run --separate-stderr grun --report report.txt -- true
  status_is 2
  err_has "write './report.txt' for a file in the current directory"
  run --separate-stderr grun --json out.json -- true
  status_is 2
  err_has "GPUCAP_REPORT_JSON='out.json'"
  run --separate-stderr grun --trace t.csv -- true
  status_is 2
  err_has "GPUCAP_TRACE='t.csv'"
}

@test "bad --device-limit lists" {
  run --separate-stderr grun --device-limit 4GiB -- true
  status_is 2
  err_has "'4GiB' is not ORDINAL=SIZE"
  err_has "--limit SIZE for every device"
  run --separate-stderr grun --device-limit 0=1GiB,0=2GiB -- true
  status_is 2
  err_has "device 0 is listed twice"
  run --separate-stderr grun --device-limit 64=1GiB -- true
  status_is 2
  err_has "GPUCAP_MEMORY_LIMIT='64:1GiB'"
}

@test "a TF_FORCE_GPU_ALLOW_GROWTH warning is left to the library" {
  export TF_FORCE_GPU_ALLOW_GROWTH=True
  run --separate-stderr grun -- true
  status_is 0
  [ -z "$stderr" ]
}

# ---- Usage errors ----

@test "options that set one variable twice are refused" {
  run --separate-stderr grun --limit 1GiB --device-limit 0=1GiB -- true
  status_is 2
  err_has "--limit and --device-limit both set GPUCAP_MEMORY_LIMIT; give only one of them"
  run --separate-stderr grun --growth --preallocate -- true
  status_is 2
  err_has "--growth and --preallocate both set GPUCAP_ALLOW_GROWTH"
  run --separate-stderr grun --quiet --report ./r.txt -- true
  status_is 2
  err_has "--quiet and --report both set GPUCAP_REPORT"
  run --separate-stderr grun --limit 1GiB --limit 2GiB -- true
  status_is 2
  err_has "--limit is given twice; give it once"
}

@test "no '--' before the command" {
  run --separate-stderr grun --limit 1GiB sh -c true
  status_is 2
  err_has "run: put '--' before the command: gpucap run [OPTIONS] -- sh ..."
}

@test "no command" {
  run --separate-stderr grun --limit 1GiB
  status_is 2
  err_has "run: no command; usage: gpucap run [OPTIONS] -- COMMAND [ARGS...]"
  run --separate-stderr grun --
  status_is 2
  err_has "run: no command after '--'"
}

@test "a command that is not found" {
  run --separate-stderr grun -- gpucap-no-such-command
  status_is 2
  err_has "run: 'gpucap-no-such-command': command not found in PATH"
  run --separate-stderr grun -- ./nonexistent
  status_is 2
  err_has "run: cannot run './nonexistent': No such file or directory"
}

@test "a command that is not executable" {
  printf 'echo hi\n' >script.sh
  run --separate-stderr grun -- ./script.sh
  status_is 2
  err_has "run: './script.sh': permission denied"
}

@test "an unknown option, a missing value, a value for a flag" {
  run --separate-stderr grun --limt 1GiB -- true
  status_is 2
  err_has "run: unknown option '--limt'; see gpucap run --help"
  run --separate-stderr grun --limit
  status_is 2
  err_has "--limit needs a value"
  run --separate-stderr grun --quiet=yes -- true
  status_is 2
  err_has "run: --quiet takes no value"
}

@test "run --help lists every option and every setting; --version" {
  run "$GPUCAP" run --help
  status_is 0
  has "Usage: gpucap run [OPTIONS] -- COMMAND [ARGS...]"
  for o in --limit --fraction --device-limit --growth --preallocate --report --json --trace \
      --quiet --help --version; do
    has " $o"
  done
  for v in $(sed -n 's/^CFG_OPT(\([A-Z_]*\),.*/GPUCAP_\1/p' "$TOP/config/options.def"); do
    has "$v  ("
  done
  has "GPUCAP_LIB"
  run "$GPUCAP" run --version
  status_is 0
  [[ "$output" =~ ^gpucap\ [0-9]+\.[0-9]+\.[0-9]+$ ]]
  run "$GPUCAP" run -h
  status_is 0
}

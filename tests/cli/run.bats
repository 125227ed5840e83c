#!/usr/bin/env bats
# gpucap run: every option sets its variable and overrides the environment, a later one winning;
# every setting is checked by the shim's parser before anything starts (exit 125, the shim's
# message); the command (after the options, with or without '--') is exec'ed with the library in
# front of LD_PRELOAD, keeping its status, signals and output; 126/127 when it cannot run.

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
  GPUCAP_POOL=regions grun_leaks --preallocate --limit 2GiB --json ./pre.json --quiet -- \
    "$WORKLOAD" >/dev/null
  GPUCAP_POOL=regions grun_leaks --growth --limit 2GiB --json ./grow.json --quiet -- \
    "$WORKLOAD" >/dev/null
  grep -q '"driver_alloc_calls": 1,' pre.json
  grep -q '"driver_alloc_calls": 2,' grow.json
}

@test "VMM-backed: --preallocate maps the cap at once; --growth maps what requests need" {
  grun_leaks --preallocate --limit 2GiB --json ./pre.json --quiet -- "$WORKLOAD" >/dev/null
  grun_leaks --growth --limit 2GiB --json ./grow.json --quiet -- "$WORKLOAD" >/dev/null
  grep -q '"backing": "vmm",' pre.json
  grep -q '"peak_pool_bytes": 2147483648,' pre.json
  grep -q '"driver_unmap_calls": 0,' pre.json # a refused 1 GiB request does not unmap the rest
  grep -q '"peak_pool_bytes": 1610612736,' grow.json # 1.5 GiB used at most
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
  [ "$(head -n 1 t.csv)" = "Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held,Verdict,Library,Spilled" ]
  [ "$(grep -c ',allocate,' t.csv)" -eq 3 ]
  [ "$(grep -c ',allocate failure,0x0,1073741824,0x0,0,refused,0,cap_full,workload,0$' t.csv)" -eq 1 ]
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

@test "--device-limit 0=SIZE,1:SIZE becomes 0:SIZE,1:SIZE; repeated, the lists join" {
  export FAKECUDA_DEVICES=2
  run grun --device-limit 0=1GiB,1:2Gi -- sh -c 'echo "$GPUCAP_MEMORY_LIMIT"'
  [ "$output" = "0:1GiB,1:2GiB" ]
  run grun --device-limit 0=1GiB --device-limit '1 = 2GiB' -- sh -c 'echo "$GPUCAP_MEMORY_LIMIT"'
  [ "$output" = "0:1GiB,1:2GiB" ]
  run grun --device-limit 0=1GiB,1=1GiB --device-limit 1=3GiB -- sh -c 'echo "$GPUCAP_MEMORY_LIMIT"'
  [ "$output" = "0:1GiB,1:3GiB" ]
}

@test "Kubernetes' 8Gi, a percentage, 0:SIZE in --limit: one grammar, capping the workload" {
  run --separate-stderr grun_leaks --limit 3Gi -- "$WORKLOAD"
  status_is 0
  has "total     3072 MiB"
  run --separate-stderr grun_leaks --fraction 25% -- "$WORKLOAD"
  status_is 0
  has "total     4096 MiB"
  run --separate-stderr grun_leaks --limit 0=1GiB -- "$WORKLOAD"
  status_is 0
  has "total     1024 MiB"
  export GPUCAP_MEMORY_FRACTION=0=12.5%
  run --separate-stderr grun_leaks -- "$WORKLOAD"
  status_is 0
  has "total     2048 MiB"
}

@test "options override the environment" {
  export GPUCAP_MEMORY_LIMIT=1GiB GPUCAP_REPORT=off
  run grun --limit 4GiB --report stderr -- sh -c 'echo "$GPUCAP_MEMORY_LIMIT $GPUCAP_REPORT"'
  [ "$output" = "4GiB stderr" ]
}

@test "settings without an option pass through from the environment" {
  export GPUCAP_POOL=off GPUCAP_VERBOSE=0
  run --separate-stderr grun -- sh -c 'echo "$GPUCAP_POOL $GPUCAP_VERBOSE"'
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
  run --separate-stderr env LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$(preload_env)" \
    ASAN_OPTIONS=detect_leaks=0 GPUCAP="$GPUCAP" sh -c 'echo $$; exec "$GPUCAP" run -- sh -c "echo \$\$"'
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
  run --separate-stderr grun -- printf '[%s]' -- --limit '' 'a b'
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
  status_is 125
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
  status_is 125
  err_has "gpucap: error: run: GPUCAP_LIB='/nonexistent/libgpucap.so': No such file or directory"
  [ ! -e ran ]
}

@test "a library the loader cannot load stops the run instead of running uncapped" {
  printf 'not a library\n' >bogus.so
  # What ld.so alone does with it: one "ignored" line, and the program runs, uncapped.
  run env LD_PRELOAD="$SCRATCH/bogus.so" sh -c 'touch ran-without; exit 0'
  status_is 0
  [ -e ran-without ]
  run --separate-stderr env GPUCAP_LIB="$SCRATCH/bogus.so" "$GPUCAP" run touch ran
  status_is 125
  err_has "gpucap: error: run: the library cannot be loaded on this system"
  err_has "The loader says: $SCRATCH/bogus.so: "
  [ ! -e ran ]
}

# ---- Bad settings: the shim's message, exit 125, nothing started ----

@test "--arenas N sets GPUCAP_ARENAS, auto too; a count out of 1-16 stops the run" {
  run --separate-stderr grun --arenas 4 -- sh -c 'echo "$GPUCAP_ARENAS"'
  status_is 0
  [ "$output" = "4" ]
  run --separate-stderr grun --arenas auto -- sh -c 'echo "$GPUCAP_ARENAS"'
  status_is 0
  [ "$output" = "auto" ]
  run --separate-stderr grun --arenas 17 -- touch ran
  status_is 125
  err_has "GPUCAP_ARENAS='17'"
  err_has "GPUCAP_ARENAS comes from --arenas N"
  [ ! -e ran ]
}

@test "--cap-covers WHAT sets GPUCAP_CAP_COVERS; anything but process or allocations stops the run" {
  run --separate-stderr grun --cap-covers allocations -- sh -c 'echo "$GPUCAP_CAP_COVERS"'
  status_is 0
  [ "$output" = "allocations" ]
  run --separate-stderr grun --cap-covers driver -- touch ran
  status_is 125
  err_has "GPUCAP_CAP_COVERS='driver'"
  err_has "GPUCAP_CAP_COVERS comes from --cap-covers WHAT"
  [ ! -e ran ]
}

@test "a bad option value: the shim's message, where it came from, exit 125, nothing run" {
  run --separate-stderr grun --limit 1GB -- touch ran
  status_is 125
  err_has "gpucap: error: GPUCAP_MEMORY_LIMIT='1GB': 'GB' is ambiguous"
  err_has "did you mean '1GiB'?"
  err_has "GPUCAP_MEMORY_LIMIT comes from --limit SIZE"
  [ ! -e ran ]
  [ -z "$output" ]
}

@test "a size without a unit under 1 MiB is refused, asking for a unit; bytes from 1 MiB are taken" {
  for v in 8 512 1048575; do
    run --separate-stderr grun --limit "$v" -- touch ran
    status_is 125
    err_has "GPUCAP_MEMORY_LIMIT='$v': '$v' has no unit, and $v bytes cannot be meant; write a unit ('${v}GiB', '${v}MiB'), or bytes from 1048576 (1 MiB) up"
    [ ! -e ran ]
  done
  run --separate-stderr grun --device-limit 0=16 -- touch ran
  status_is 125
  err_has "device 0: '16' has no unit"
  run --separate-stderr grun --share x --min 64 -- touch ran
  status_is 125
  err_has "GPUCAP_SHARE_MIN='64': '64' has no unit"
  run --separate-stderr grun_leaks --limit 1073741824 -- "$WORKLOAD"
  status_is 0
  has "total     1024 MiB"
}

@test "a cap above the device's memory: one warning from the library at the device's first use" {
  run --separate-stderr grun_leaks --limit 20TiB -- "$WORKLOAD"
  status_is 0
  [ "$(grep -c "is more than the device's" <<<"$stderr")" -eq 1 ]
  err_has "gpucap: warning: device 0: the cap (20.0 TiB) is more than the device's 16.0 GiB: the device's memory is the only limit there"
  # A program that never uses CUDA hears nothing of it.
  run --separate-stderr grun --limit 20TiB -- true
  status_is 0
  [ -z "$stderr" ]
}

@test "a per-device cap above the device's memory: gpucap run warns before the program starts" {
  run --separate-stderr grun --device-limit 0=20TiB -- sh -c 'echo started >&2'
  status_is 0
  [ "${stderr%%$'\n'*}" = "gpucap: warning: run: the cap of device 0 (20.0 TiB, from --device-limit) is more than its 16.0 GiB: the device's memory is the only limit there" ]
  run --separate-stderr grun --device-limit 0=8GiB -- true
  status_is 0
  [ -z "$stderr" ]
}

@test "a bad environment setting stops the run too, naming the variable" {
  export GPUCAP_POOL=of
  run --separate-stderr grun -- touch ran
  status_is 125
  err_has "gpucap: error: GPUCAP_POOL='of'"
  err_has "GPUCAP_POOL comes from the environment: correct it or unset it"
  [ ! -e ran ]
}

@test "an empty setting is unset: in the environment, and from an option" {
  export GPUCAP_MEMORY_FRACTION= GPUCAP_MEMORY_LIMIT=1GiB
  run --separate-stderr grun_leaks -- "$WORKLOAD"
  status_is 0
  has "total     1024 MiB"
  run --separate-stderr grun_leaks --limit '' -- "$WORKLOAD"
  status_is 0
  has "total    16384 MiB"
  run --separate-stderr grun --limit '' -- sh -c 'echo "${GPUCAP_MEMORY_LIMIT-unset}"'
  [ "$output" = "unset" ]
}

@test "a misspelled GPUCAP_ variable stops the run, naming the setting meant" {
  export GPUCAP_MEMROY_LIMIT=1GiB
  run --separate-stderr grun -- touch ran
  status_is 125
  err_has "gpucap: error: GPUCAP_MEMROY_LIMIT is not a gpucap setting (did you mean GPUCAP_MEMORY_LIMIT?)"
  [ ! -e ran ]
  unset GPUCAP_MEMROY_LIMIT
  export GPUCAP_LIB="$LIB"
  run grun -- true
  status_is 0
}

@test "a bad option value is reported even when the environment has a good one" {
  export GPUCAP_MEMORY_FRACTION=0.5
  run --separate-stderr grun --fraction 150% -- true
  status_is 125
  err_has "GPUCAP_MEMORY_FRACTION='150%'"
  err_has "comes from --fraction F"
}

@test "an option overriding a bad environment value makes the run valid" {
  export GPUCAP_MEMORY_LIMIT=garbage
  run grun --limit 1GiB -- sh -c 'echo "$GPUCAP_MEMORY_LIMIT"'
  status_is 0
  [ "$output" = "1GiB" ]
}

@test "bare file names are files in the working directory, as for gpucap plot -o" {
  run --separate-stderr grun_leaks --limit 2GiB --json run.json --trace trace.csv \
    --report report.txt "$WORKLOAD"
  status_is 0
  grep -q '"cap_bytes": 2147483648' run.json
  [ "$(head -n 1 trace.csv)" = "Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held,Verdict,Library,Spilled" ]
  grep -q '^gpucap: memory report (pid ' report.txt
}

@test "a word that is not a file name is refused, with how to name such a file" {
  run --separate-stderr grun --json - -- touch ran
  status_is 125
  err_has "GPUCAP_REPORT_JSON='-': '-' is taken as a word, not a file name"
  err_has "write './-' for a file of that name"
  run --separate-stderr grun --trace 1 -- touch ran
  status_is 125
  err_has "GPUCAP_TRACE='1'"
  run --separate-stderr grun --report stdout -- touch ran
  status_is 125
  err_has "accepted: stderr, off or a file path"
  [ ! -e ran ]
  run --separate-stderr grun --json off --trace OFF -- sh -c 'echo "$GPUCAP_REPORT_JSON $GPUCAP_TRACE"'
  status_is 0
  [ "$output" = "off OFF" ]
}

@test "bad --device-limit lists" {
  run --separate-stderr grun --device-limit 4GiB -- true
  status_is 125
  err_has "--device-limit '4GiB' names no device"
  err_has "--limit SIZE for every device"
  run --separate-stderr grun --device-limit 0=1GiB,0=2GiB -- true
  status_is 125
  err_has "device 0 is listed twice"
  run --separate-stderr grun --device-limit 64=1GiB -- true
  status_is 125
  err_has "device ordinal 64 is out of range 0..63"
}

@test "no cap at all: one notice before the command starts; none with a cap, none with --quiet" {
  run --separate-stderr grun -- sh -c 'echo started >&2'
  status_is 0
  [ "$stderr" = "gpucap: no cap is set (--limit, --fraction, --device-limit): the command's device memory is not limited, only reported
started" ]
  for opts in "--limit 1GiB" "--fraction 50%" "--device-limit 0=1GiB" "--share s --max 1GiB" \
      "--quiet"; do
    run --separate-stderr grun $opts -- true
    status_is 0
    [ -z "$stderr" ]
  done
  export GPUCAP_MEMORY_LIMIT=1GiB
  run --separate-stderr grun -- true
  [ -z "$stderr" ]
}

@test "a TF_FORCE_GPU_ALLOW_GROWTH warning is left to the library" {
  export TF_FORCE_GPU_ALLOW_GROWTH=True
  run --separate-stderr grun --limit 1GiB -- true
  status_is 0
  [ -z "$stderr" ]
}

# ---- Usage errors ----

@test "a later option wins over an earlier one for the same variable (GNU)" {
  run --separate-stderr grun --growth --preallocate -- sh -c 'echo "$GPUCAP_ALLOW_GROWTH"'
  [ "$output" = "false" ]
  run --separate-stderr grun --quiet --report ./r.txt -- sh -c 'echo "$GPUCAP_REPORT"'
  [ "$output" = "./r.txt" ]
  run --separate-stderr grun --report ./r.txt --quiet -- sh -c 'echo "$GPUCAP_REPORT"'
  [ "$output" = "off" ]
  run --separate-stderr grun_leaks --limit 1GiB --limit 2GiB -- "$WORKLOAD"
  status_is 0
  has "total     2048 MiB"
}

@test "--limit with --device-limit is refused: either reading would leave devices uncapped" {
  run --separate-stderr grun --limit 1GiB --device-limit 0=1GiB -- touch ran
  status_is 125
  err_has "--limit and --device-limit both set GPUCAP_MEMORY_LIMIT"
  run --separate-stderr grun --device-limit 0=1GiB --limit 1GiB -- touch ran
  status_is 125
  [ ! -e ran ]
  run --separate-stderr grun --device-limit 0=1GiB --limit '' -- sh -c 'echo "${GPUCAP_MEMORY_LIMIT-unset}"'
  [ "$output" = "unset" ]
}

@test "the command starts at the first word that is not an option; '--' is optional" {
  run --separate-stderr grun_leaks --limit 1GiB "$WORKLOAD"
  status_is 0
  has "total     1024 MiB"
  run grun --quiet printf '[%s]' --limit 4GiB -- x
  status_is 0
  [ "$output" = "[--limit][4GiB][--][x]" ]
  run grun --quiet -- --version
  status_is 127
}

@test "no command: 125, as every failure of run's own" {
  run --separate-stderr grun --limit 1GiB
  status_is 125
  err_has "run: no command; usage: gpucap run [OPTIONS] [--] COMMAND [ARGS...]"
  run --separate-stderr grun --
  status_is 125
  err_has "run: no command after '--'"
}

@test "a command that is not found: 127, as env and timeout" {
  run --separate-stderr grun -- gpucap-no-such-command
  status_is 127
  err_has "run: 'gpucap-no-such-command': command not found in PATH"
  run --separate-stderr grun -- ./nonexistent
  status_is 127
  err_has "run: cannot run './nonexistent': No such file or directory"
  printf '#!/nonexistent/interpreter\n' >script.sh
  chmod +x script.sh
  run --separate-stderr grun -- ./script.sh
  status_is 127
  err_has "its interpreter (the #! line) or loader was not found"
}

@test "a command that is not executable: 126" {
  printf 'echo hi\n' >script.sh
  run --separate-stderr grun -- ./script.sh
  status_is 126
  err_has "run: './script.sh': permission denied"
  mkdir dir
  run --separate-stderr grun -- ./dir
  status_is 126
}

@test "an unknown option, a missing value, a value for a flag: 125, never the 2 a program exits with" {
  run --separate-stderr grun --limt 1GiB -- true
  status_is 125
  err_has "run: unknown option '--limt'; see gpucap run --help"
  run --separate-stderr grun --limit
  status_is 125
  err_has "--limit needs a value"
  run --separate-stderr grun --quiet=yes -- true
  status_is 125
  err_has "run: --quiet takes no value"
}

@test "run --help lists every option and every setting; --version" {
  run "$GPUCAP" run --help
  status_is 0
  has "Usage: gpucap run [OPTIONS] [--] COMMAND [ARGS...]"
  has "125 when gpucap refuses to start it (a usage error"
  for o in --limit --fraction --device-limit --growth --preallocate --report --json --trace \
      --quiet --allow-uncapped --help --version; do
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

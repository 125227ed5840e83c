#!/usr/bin/env bash
# Processes that never touch CUDA: under the shim they print the same, exit the same, write
# nothing to stderr and never load the driver, even with a malformed gpucap setting around.
. "$TOP/tests/integ/lib.sh"

export GPUCAP_MEMORY_LIMIT=garbage
# Under ASan the interpreters' own leaks would be reported; they are not what this checks.
export ASAN_OPTIONS=detect_leaks=0
check_same() {
  desc=$1
  shift
  want_out=$("$@" 2>"$WORK/want_err")
  want_rc=$?
  got_out=$(with_shim "$@" 2>"$WORK/got_err")
  got_rc=$?
  is "$got_out" "$want_out" "$desc: same stdout"
  is "$got_rc" "$want_rc" "$desc: same exit status ($want_rc)"
  is "$(cat "$WORK/got_err")" "$(cat "$WORK/want_err")" "$desc: same stderr"
}

check_same "/bin/true" /bin/true
check_same "/bin/false" /bin/false
check_same "a shell" sh -c 'echo hello; ls / >/dev/null; exit 3'
if command -v python3 >/dev/null; then
  check_same "python" python3 -c 'import ctypes, sys; print(sys.version_info[0]); sys.exit(5)'
else
  skip "python" "python3 is not installed"
fi
maps=$(with_shim sh -c 'cat /proc/$$/maps')
printf '%s' "$maps" | grep -q libgpucap
ok $? "the shim is loaded"
printf '%s' "$maps" | grep -q libcuda
ok $((!$?)) "the driver is not"

done_testing

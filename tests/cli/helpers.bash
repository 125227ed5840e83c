# Shared set-up of the gpucap CLI tests (bats; `load helpers` from each tests/cli/*.bats).
# make exports BUILD (absolute), TOP and, in sanitizer builds, SAN_PRELOAD: the sanitizer
# runtime that must come first in LD_PRELOAD of any program the (sanitized) shim is loaded into.
# gpucap run keeps a leading sanitizer runtime first, so tests put it in LD_PRELOAD themselves.

bats_require_minimum_version 1.5.0

: "${BUILD:?run the CLI tests through make check}"
: "${TOP:?run the CLI tests through make check}"

GPUCAP="$BUILD/gpucap"
FAKE_DIR="$BUILD/fakecuda"
WORKLOAD="$BUILD/tests/workload"
LIB="$(realpath "$BUILD/libgpucap.so")"

setup() {
  # The caller's settings must not leak in.
  local v
  for v in $(env | sed -n 's/^\(GPUCAP_[A-Z_]*\|FAKECUDA_[A-Z_]*\|TF_FORCE_GPU_ALLOW_GROWTH\|LD_PRELOAD\)=.*/\1/p'); do
    unset "$v"
  done
  # The CLI's figures are of allocations alone (the driver's own memory: tests/integ/overhead.sh).
  export FAKECUDA_DRIVER_MEMORY=off
  SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/gpucap-cli.XXXXXX")"
  cd "$SCRATCH" || return 1
}

teardown() {
  cd / && rm -rf "$SCRATCH"
}

# preload_env: the LD_PRELOAD a test starts gpucap run with ("" or the sanitizer runtime).
preload_env() {
  printf '%s' "${SAN_PRELOAD:-}"
}

# grun ARGS...: gpucap run over the fake driver, as a user would start it. Shells and tools run
# under it are not instrumented: their own leaks are not what these tests check.
grun() {
  LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$(preload_env)" ASAN_OPTIONS=detect_leaks=0 \
    "$GPUCAP" run "$@"
}

# grun_leaks ARGS...: the same, leak checks on (for the instrumented workload).
grun_leaks() {
  LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$(preload_env)" "$GPUCAP" run "$@"
}

# has TEXT: $output contains TEXT.
has() {
  if [[ "$output" != *"$1"* ]]; then
    printf 'output lacks: %s\n--- output:\n%s\n' "$1" "$output" >&2
    return 1
  fi
}

# hasnt TEXT: $output does not contain TEXT.
hasnt() {
  if [[ "$output" == *"$1"* ]]; then
    printf 'output has: %s\n--- output:\n%s\n' "$1" "$output" >&2
    return 1
  fi
}

# err_has TEXT: $stderr (run --separate-stderr) contains TEXT.
err_has() {
  if [[ "$stderr" != *"$1"* ]]; then
    printf 'stderr lacks: %s\n--- stderr:\n%s\n' "$1" "$stderr" >&2
    return 1
  fi
}

# status_is N: $status is N.
status_is() {
  if [ "$status" -ne "$1" ]; then
    printf 'status %s, want %s\n--- output:\n%s\n--- stderr:\n%s\n' "$status" "$1" "$output" \
      "${stderr:-}" >&2
    return 1
  fi
}

# Shared helpers for gpucap's integration tests (sourced; needs BUILD and TOP from make).
# Programs run over the fake driver in build/fakecuda, with the shim preloaded after the
# sanitizer runtime when the build is sanitized.
. "$TOP/tests/tap.sh"

FAKE_DIR="$BUILD/fakecuda"
SHIM="$BUILD/libgpucap.so"
TESTBIN="$BUILD/tests"
REQUESTS="$TOP/tests/fakecuda/cudart-probe-gpa-requests.txt"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpucap-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# Clear gpucap's and the fake's settings so the caller's environment cannot leak in.
for v in $(env | sed -n 's/^\(GPUCAP_[A-Z_]*\|FAKECUDA_[A-Z_]*\|TF_FORCE_GPU_ALLOW_GROWTH\)=.*/\1/p'); do
  unset "$v"
done

preload() {
  if [ -n "${SAN_PRELOAD:-}" ]; then
    echo "$SAN_PRELOAD $SHIM"
  else
    echo "$SHIM"
  fi
}

# with_shim CMD...: runs CMD over the fake driver with the shim preloaded.
with_shim() {
  LD_LIBRARY_PATH="$FAKE_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LD_PRELOAD="$(preload)" "$@"
}

# without_shim CMD...: the same, fake driver only (the sanitizer runtime still first, for
# programs not built with it, such as those built against NVIDIA's runtime).
without_shim() {
  LD_LIBRARY_PATH="$FAKE_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    LD_PRELOAD="${SAN_PRELOAD:-}${SAN_PRELOAD:+${LD_PRELOAD:+ }}${LD_PRELOAD:-}" "$@"
}

# json_num FILE KEY: the first numeric value of "KEY": in FILE (flat JSON written by the fake).
json_num() {
  grep -o "\"$2\": *-\{0,1\}[0-9][0-9]*" "$1" | head -n 1 | sed 's/.*: *//'
}

# json_obj_num FILE OBJECT KEY: the numeric "KEY" inside the first "OBJECT": { ... }.
json_obj_num() {
  tr -d '\n' < "$1" | grep -o "\"$2\": *{[^}]*}" | head -n 1 | grep -o "\"$3\": *[0-9][0-9]*" \
    | sed 's/.*: *//'
}

# report_sides DESC DIR ESTATUS ISTATUS: the output of the two sides of a two-process exchange
# (DIR/e.out and e.err: the exporter; i.out and i.err: the importer), each side one check.
report_sides() {
  sed 's/^/    /' "$2/e.out"
  sed 's/^/# exporter stderr: /' "$2/e.err" | head -5
  ok "$3" "$1: the exporter's checks"
  sed 's/^/    /' "$2/i.out"
  sed 's/^/# importer stderr: /' "$2/i.err" | head -5
  ok "$4" "$1: the importer's checks"
}

# Runs a nested TAP program and folds its result into one check of this script.
tap_program() {
  desc=$1
  shift
  out=$("$@" 2>"$WORK/stderr")
  status=$?
  printf '%s\n' "$out" | sed 's/^/    /'
  if [ -s "$WORK/stderr" ]; then
    sed 's/^/# stderr: /' "$WORK/stderr" | head -20
  fi
  ok "$status" "$desc"
}

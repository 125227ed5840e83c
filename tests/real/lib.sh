# The table of real programs (sourced by tests/real/real.sh and libs.sh). A row runs one program
# of tests/real (built by tests/real/real.mk into $BUILD/real), linked against the static and
# the shared runtime, over the fake driver (FAKECUDA_BACKING=1: device bytes are real) once
# without gpucap and once under a cap, and checks from outside:
#   - each run ends with status 0 and every expectation the program printed held (NAME=FAIL...);
#   - the facts it printed are the same with and without gpucap, except "~" facts, and the
#     memory it saw (~..._total, ~total_global_mem, ~free_at_start) is the device's without
#     gpucap and the cap with it; ~ facts a row names must read as declared;
#   - the fake driver's report (FAKECUDA_STATS) of every process: no hazard, no stale or pending
#     work; without gpucap every driver allocation was freed by a call (alloc_calls =
#     free_calls) and nothing leaked; with gpucap the driver's peak never passed the cap;
#   - gpucap's exit report (GPUCAP_REPORT_JSON) agrees with the driver's view: nothing left in
#     use, the driver allocations not freed by a call are exactly the pool's ((alloc - free)
#     calls per device), and what the driver still held at exit is the pool of the contexts
#     still alive.
# A row may name expectations known to fail (a gpucap bug reported, or something the fake
# driver does not model yet): they are reported as TODO tests, with the reason.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

REAL="$BUILD/real"
export FAKECUDA_BACKING=1

# bytes SIZE: 64MiB, 1GiB or a plain number of bytes.
bytes() {
  case $1 in
  *GiB) echo $((${1%GiB} << 30)) ;;
  *MiB) echo $((${1%MiB} << 20)) ;;
  *) echo "$1" ;;
  esac
}

# cap_of CAP DEV: the cap of device DEV in a GPUCAP_MEMORY_LIMIT value (one size or a list).
cap_of() {
  case $1 in
  *:*) bytes "$(printf '%s\n' "$1" | tr ',' '\n' | sed -n "s/^$2://p")" ;;
  *) bytes "$1" ;;
  esac
}

# fake_dev FILE DEV KEY: KEY of device DEV in the fake's report.
fake_dev() {
  grep "\"ordinal\": $2," "$1" | grep -o "\"$3\": *[0-9]*" | sed 's/.*: *//'
}

# gj_sum FILE KEY DEV LIVE: KEY summed over the devices rows of DEV in gpucap's JSON report;
# LIVE=1: only rows whose context was not destroyed.
gj_sum() {
  awk -v key="\"$2\":" -v dev="$3" -v live="$4" '
    $1 == "\"device\":" { d = $2 + 0 }
    $1 == "\"context_destroyed\":" { gone = ($2 ~ /true/) }
    $1 == key { if (d == dev && (live != 1 || !gone)) s += $2 + 0 }
    END { print s + 0 }' "$1"
}

# The lines of a program's output that must not depend on gpucap, without the known ones.
facts() {
  grep -v '^~' "$1" | grep -v '^failures=' | grep -Ev "^($known_re)="
}

# Expectations that failed in a program's output ("NAME=FAIL ..."), without the known ones.
failed() {
  grep -E '^[a-z0-9_]+=FAIL( |$)' "$1" | grep -Ev "^($known_re)="
}

# row FAMILY [cap=SIZE|LIST] [mem=SIZE] [devices=N] [procs=N] [pool=on|vmm|regions|off]
#     [teardown=REASON] [leaks=REASON]
#     [capfact=NAME=WITHOUT|WITH]... [known=NAME:MODE:REASON]...
# teardown: some of the program's memory is freed by a context teardown (cudaDeviceReset), not
# by a call. leaks: a library keeps memory the program cannot free. MODE of a known
# expectation: "both" (the fake driver or a library: fails with and without gpucap) or "gpucap"
# (holds without gpucap, not under it: a gpucap bug).
row() {
  local family=$1 cap mem ndev procs teardown leaks pool capfacts knowns kind
  shift
  row_options "$@"
  for kind in static shared; do
    local bin="$REAL/${family}_$kind" d="$WORK/$family.$pool.$kind" name="$family ($kind runtime)"
    [ "$pool" = on ] || name="$family ($kind runtime, GPUCAP_POOL=$pool)"
    if [ ! -x "$bin" ]; then
      skip "$name" "$bin was not built"
      continue
    fi
    mkdir -p "$d"
    (cd "$d" && FAKECUDA_MEMORY=$mem FAKECUDA_DEVICES=$ndev FAKECUDA_STATS="$d/fake0.%p.json" \
      without_shim "$bin" > "$d/out0" 2> "$d/err0")
    local rc0=$?
    (cd "$d" && FAKECUDA_MEMORY=$mem FAKECUDA_DEVICES=$ndev FAKECUDA_STATS="$d/fake1.%p.json" \
      GPUCAP_MEMORY_LIMIT=$cap GPUCAP_POOL=$pool GPUCAP_REPORT=off \
      GPUCAP_REPORT_JSON="$d/gpucap.%p.json" \
      with_shim "$bin" > "$d/out1" 2> "$d/err1")
    local rc1=$?
    check_runs "$name" "$d" "$rc0" "$rc1"
    check_known "$name" "$d" "$knowns"
    is "$(facts "$d/out1")" "$(facts "$d/out0")" "$name: the same facts with and without gpucap"
    check_capfacts "$name" "$d" "$mem" "$cap" "$capfacts"
    check_fake "$name" "$d" "$procs" "$ndev" "$cap" "$teardown$leaks"
    check_agreement "$name" "$d" "$ndev" "$leaks" "$teardown"
  done
}

# row_options OPTION...: a row's options (above) into the caller's variables cap, mem, ndev,
# procs, pool, teardown, leaks, capfacts and knowns (the caller declares them local), defaults
# for the rest, and known_re: the names of the known expectations as one regular expression.
row_options() {
  local opt
  cap=64MiB mem=256MiB ndev=1 procs=1 pool=on teardown="" leaks="" capfacts="" knowns=""
  for opt in "$@"; do
    case $opt in
    cap=*) cap=${opt#cap=} ;;
    mem=*) mem=${opt#mem=} ;;
    devices=*) ndev=${opt#devices=} ;;
    procs=*) procs=${opt#procs=} ;;
    pool=*) pool=${opt#pool=} ;;
    teardown=*) teardown=${opt#teardown=} ;;
    leaks=*) leaks=${opt#leaks=} ;;
    capfact=*) capfacts="$capfacts ${opt#capfact=}" ;;
    known=*) knowns="$knowns
${opt#known=}" ;;
    esac
  done
  known_re=$(printf '%s\n' "$knowns" | sed -n 's/^\([a-z0-9_]*\):.*/\1/p' | paste -sd '|' -)
  known_re=${known_re:-^$}
}

# Status 0, or 1 with only known expectations failing; no other expectation failed.
check_runs() {
  local name=$1 d=$2 m bad rc
  local rcs=("$3" "$4") how=(without under)
  for m in 0 1; do
    bad=$(failed "$d/out$m")
    rc=${rcs[$m]}
    [ -z "$bad" ] && { [ "$rc" = 0 ] || { [ "$rc" = 1 ] && grep -Eq "^($known_re)=" "$d/out$m"; }; }
    local st=$?
    ok $st "$name ${how[$m]} gpucap: runs to its end, every expectation holds"
    if [ $st != 0 ]; then
      echo "#   exit status $rc"
      printf '%s\n' "$bad" | sed 's/^/#   /'
      grep -v '^Bin (' "$d/err$m" | head -15 | sed 's/^/#   stderr: /'
    fi
  done
}

# Each known expectation is a TODO test, failing while the expectation does: "both", when it
# fails in either run; "gpucap", when the fact reads differently under gpucap (it must hold
# without).
check_known() {
  local name=$1 d=$2 fact mode why v0 v1 bad
  while IFS=: read -r fact mode why; do
    [ -n "$fact" ] || continue
    v0=$(grep "^$fact=" "$d/out0")
    v1=$(grep "^$fact=" "$d/out1")
    if [ "$mode" = gpucap ]; then
      if printf '%s' "$v0" | grep -Eq '=FAIL( |$)'; then
        ok 1 "$name: $fact holds without gpucap ($v0)"
        continue
      fi
      [ "$v1" != "$v0" ]
    else
      printf '%s\n%s\n' "$v0" "$v1" | grep -Eq '=FAIL( |$)'
    fi
    bad=$?
    tap_n=$((tap_n + 1))
    echo "$([ $bad = 0 ] && echo 'not ')ok $tap_n - $name: $fact # TODO $why"
  done <<< "$3"
}

check_capfacts() {
  local name=$1 d=$2 mem=$3 cap=$4 want="" got="" m line key val dev expect spec
  for m in 0 1; do
    while IFS= read -r line; do
      key=${line%%=*}
      key=${key#\~}
      val=${line#*=}
      dev=$(printf '%s\n' "$key" | sed -n 's/^dev\([0-9]*\)_.*/\1/p')
      expect=""
      for spec in $5; do
        if [ "${spec%%=*}" = "$key" ]; then
          spec=${spec#*=}
          if [ $m = 0 ]; then expect=${spec%%|*}; else expect=${spec#*|}; fi
        fi
      done
      if [ -z "$expect" ]; then
        case $key in
        *_total | total_global_mem | free_at_start)
          if [ $m = 0 ]; then expect=$(bytes "$mem"); else expect=$(cap_of "$cap" "${dev:-0}"); fi ;;
        esac
      fi
      if [ -n "$expect" ]; then
        got="$got $m:$key=$val"
        want="$want $m:$key=$expect"
      fi
    done < <(grep '^~' "$d/out$m")
  done
  is "$got" "$want" "$name: sees the device's memory without gpucap and the cap under it"
}

check_fake() {
  local name=$1 d=$2 procs=$3 ndev=$4 cap=$5 freed_otherwise=$6 f bad="" m dev n
  for m in 0 1; do
    n=$(ls "$d"/fake$m.*.json 2>/dev/null | wc -l)
    [ "$n" = "$procs" ] || bad="$bad fake$m:$n-reports"
    for f in "$d"/fake$m.*.json; do
      [ -e "$f" ] || continue
      for key in hazards stale_work pending_work; do
        [ "$(json_num "$f" $key)" = 0 ] || bad="$bad $(basename "$f"):$key=$(json_num "$f" $key)"
      done
      for dev in $(seq 0 $((ndev - 1))); do
        if [ $m = 0 ] && [ -z "$freed_otherwise" ]; then
          [ "$(fake_dev "$f" "$dev" alloc_calls)" = "$(fake_dev "$f" "$dev" free_calls)" ] ||
            bad="$bad $(basename "$f"):dev$dev-allocations-not-freed"
          [ "$(fake_dev "$f" "$dev" leaked_bytes)" = 0 ] || bad="$bad $(basename "$f"):dev$dev-leaked"
        fi
        if [ $m = 1 ] && [ "$(fake_dev "$f" "$dev" peak_bytes)" -gt "$(cap_of "$cap" "$dev")" ]; then
          bad="$bad $(basename "$f"):dev$dev-peak-$(fake_dev "$f" "$dev" peak_bytes)-over-the-cap"
        fi
      done
    done
  done
  is "$bad" "" "$name: the driver saw $procs process(es), no hazard or pending work, everything freed without gpucap${freed_otherwise:+ (but: $freed_otherwise)}, never more than the cap under it"
}

# gpucap counts the blocks a context teardown took as frees in its pass-through rows, where the
# driver counts no call: the calls are compared only for rows without teardown. The shared
# runtime may release its primary context after gpucap's report was written (the static one
# before): what the driver held at exit is then nothing rather than the live pools.
check_agreement() {
  local name=$1 d=$2 ndev=$3 leaks=$4 teardown=$5 bad="" f g dev fa ff ga gf held pools
  for g in "$d"/gpucap.*.json; do
    [ -e "$g" ] || { bad=" no-gpucap-report"; break; }
    f="$d/fake1.$(basename "$g" | sed 's/gpucap\.\([0-9]*\)\.json/\1/').json"
    [ -e "$f" ] || { bad="$bad $(basename "$g"):no-driver-report"; continue; }
    for dev in $(seq 0 $((ndev - 1))); do
      if [ -z "$leaks" ] && [ "$(gj_sum "$g" bytes_in_use "$dev" 1)" != 0 ]; then
        bad="$bad dev$dev:bytes_in_use=$(gj_sum "$g" bytes_in_use "$dev" 1)"
      fi
      fa=$(fake_dev "$f" "$dev" alloc_calls)
      ff=$(fake_dev "$f" "$dev" free_calls)
      ga=$(gj_sum "$g" driver_alloc_calls "$dev" 0)
      gf=$(gj_sum "$g" driver_free_calls "$dev" 0)
      if [ -z "$teardown" ] && [ $((fa - ff)) != $((ga - gf)) ]; then
        bad="$bad dev$dev:driver-kept-$((fa - ff))-gpucap-kept-$((ga - gf))"
      fi
      held=$(fake_dev "$f" "$dev" leaked_bytes)
      pools=$(gj_sum "$g" pool_bytes "$dev" 1)
      [ "$held" = 0 ] || [ "$held" = "$pools" ] || bad="$bad dev$dev:driver-held-$held-pools-$pools"
    done
  done
  is "$bad" "" "$name: gpucap's exit report agrees with the driver's"
}

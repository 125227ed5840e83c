#!/usr/bin/env bash
# The ends of a process's life under gpucap, judged from outside: timeouts catch hangs (each
# race is run many times), and the files written, the exit statuses and other processes say
# what happened. tests/integ/life.c is the program; see docs/design.md ("Process exit, fork,
# signals") for what each check stands for.
. "$TOP/tests/integ/lib.sh"

LIFE="$TESTBIN/life"
LINKED="$TESTBIN/lifelinked"
# Each race is run RUNS times (twice that for the cheap ones); under TSan, which is there to find
# data races rather than to reproduce hangs, fewer.
case "${SAN_PRELOAD:-}" in
*tsan*) RUNS=${LIFE_RUNS:-3} ;;
*) RUNS=${LIFE_RUNS:-10} ;;
esac
SHM="/dev/shm/gpucap-$(id -u)"

# valid_report FILE: gpucap report reads FILE (a JSON exit report).
valid_report() {
  ASAN_OPTIONS=detect_leaks=0 "$BUILD/gpucap" report "$1" >/dev/null 2>&1
}

# ---- fork: no deadlock with the driver's own fork handlers ----
# Four threads in contexts of their own grow, fail and trim pools under a tight cap (driver
# calls made with a pool lock held) while the main thread forks. The driver registers its
# pthread_atfork handlers when the program dlopen()s it, after gpucap's constructor, so its
# prepare handler runs first and holds its lock while gpucap's handlers run.
hung=0
forked=0
for i in $(seq "$RUNS"); do
  out=$(GPUCAP_MEMORY_LIMIT=32MiB GPUCAP_REPORT=off with_shim timeout 60 "$LIFE" fork 200 \
    2>/dev/null)
  rc=$?
  [ "$rc" -eq 124 ] && hung=$((hung + 1))
  [ "$out" = "forked 200" ] && forked=$((forked + 1))
done
is "$hung" 0 "fork stress: no run hung ($RUNS runs of 200 forks while threads trim pools)"
is "$forked" "$RUNS" "fork stress: every run forked 200 children and ended normally"

done_testing

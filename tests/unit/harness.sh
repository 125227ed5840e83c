#!/usr/bin/env bash
# make's test runner (tests/harness.pl) and make test's last words (tests/skipped.sh): tests run
# and summed up as prove does, then the checks they skipped, counted, with their reasons, also
# in the file make test reads; a skipped file (1..0 # SKIP) counts as well; a failure still
# fails the run.
. "$TOP/tests/tap.sh"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '#!/bin/sh\necho 1..3\necho ok 1 - a\necho "ok 2 - b # skip no chromium"\necho "ok 3 - c # SKIP no chromium"\n' >"$dir/one.sh"
printf '#!/bin/sh\necho "1..0 # SKIP frameworks not installed"\n' >"$dir/two.sh"
printf '#!/bin/sh\necho 1..1\necho "not ok 1 - broken"\n' >"$dir/bad.sh"
chmod +x "$dir"/*.sh
out=$(perl "$TOP/tests/harness.pl" 2 "$dir/skipped.txt" "$dir/one.sh" "$dir/two.sh" 2>&1)
rc=$?
is "$rc" 0 "skips are no failure"
like "$out" 'All tests successful\.' "prove's closing summary"
is "$(sed -n '/^Skipped:/,$p' <<<"$out")" "Skipped: 3 checks, in 2 files:
  $dir/one.sh: no chromium (2 checks)
  $dir/two.sh: frameworks not installed (the whole file)" \
  "then the skipped checks, counted by file and reason"
is "$(cat "$dir/skipped.txt")" "$dir/one.sh	no chromium
$dir/one.sh	no chromium
$dir/two.sh	frameworks not installed (the whole file)" "  and written for make test"
out=$(perl "$TOP/tests/harness.pl" 2 "$dir/none.txt" "$dir/bad.sh" 2>&1)
is "$?" 1 "a failing test fails the run"
like "$out" 'Skipped: none\.' "  and says that nothing was skipped"
mkdir -p "$dir/asan"
cp "$dir/skipped.txt" "$dir/asan/skipped.txt"
is "$(sh "$TOP/tests/skipped.sh" "$dir/skipped.txt" "$dir/asan/skipped.txt" "$dir/tsan/none.txt")" \
  "make test: 6 checks were skipped:
  plain, $dir/one.sh: no chromium (2)
  plain, $dir/two.sh: frameworks not installed (the whole file) (1)
  ASan+UBSan, $dir/one.sh: no chromium (2)
  ASan+UBSan, $dir/two.sh: frameworks not installed (the whole file) (1)" \
  "make test's end: every pass's skips, with their reasons"
is "$(sh "$TOP/tests/skipped.sh" "$dir/none.txt")" "make test: every check ran; none was skipped." \
  "  or that none was skipped"
done_testing

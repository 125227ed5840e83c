#!/bin/sh
# make test's last words: the checks its passes skipped, and why, from the files
# tests/harness.pl wrote ("FILE<TAB>REASON" per skipped check), one line per pass and reason.
# usage: tests/skipped.sh SKIPFILE... (plain, ASan+UBSan, TSan, in that order)
total=0
for f in "$@"; do
  [ -f "$f" ] && total=$((total + $(wc -l <"$f")))
done
if [ "$total" -eq 0 ]; then
  echo "make test: every check ran; none was skipped."
  exit 0
fi
echo "make test: $total checks were skipped:"
for f in "$@"; do
  [ -s "$f" ] || continue
  pass=plain
  case $f in
  */asan/*) pass="ASan+UBSan" ;;
  */tsan/*) pass=TSan ;;
  esac
  sort "$f" | uniq -c | sort -rn | while read -r n line; do
    printf '  %s, %s: %s (%s)\n' "$pass" "${line%%	*}" "${line#*	}" "$n"
  done
done

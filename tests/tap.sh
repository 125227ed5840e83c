# Minimal TAP producer for gpucap's shell tests; source it, call ok/is/skip, end with done_testing.
# Each check prints `ok N - what` or `not ok N - what`; done_testing prints the plan and
# exits 1 if any check failed.
tap_n=0
tap_bad=0

# ok CONDITION-EXIT-STATUS DESCRIPTION: pass when the status is 0.
ok() {
  tap_n=$((tap_n + 1))
  if [ "$1" -eq 0 ]; then
    echo "ok $tap_n - $2"
  else
    echo "not ok $tap_n - $2"
    tap_bad=$((tap_bad + 1))
  fi
}

# is GOT WANT DESCRIPTION: pass when the two strings are equal.
is() {
  tap_n=$((tap_n + 1))
  if [ "$1" = "$2" ]; then
    echo "ok $tap_n - $3"
  else
    echo "not ok $tap_n - $3"
    printf '#   got:  %s\n#   want: %s\n' "$1" "$2" | head -40
    tap_bad=$((tap_bad + 1))
  fi
}

# like GOT REGEX DESCRIPTION: pass when GOT matches the extended regex.
like() {
  tap_n=$((tap_n + 1))
  if printf '%s' "$1" | grep -Eq -- "$2"; then
    echo "ok $tap_n - $3"
  else
    echo "not ok $tap_n - $3"
    printf '#   got:  %s\n#   want match: %s\n' "$1" "$2" | head -40
    tap_bad=$((tap_bad + 1))
  fi
}

# unlike GOT REGEX DESCRIPTION: pass when GOT does not match the extended regex.
unlike() {
  tap_n=$((tap_n + 1))
  if printf '%s' "$1" | grep -Eq -- "$2"; then
    echo "not ok $tap_n - $3"
    printf '#   got:  %s\n#   want no match: %s\n' "$1" "$2" | head -40
    tap_bad=$((tap_bad + 1))
  else
    echo "ok $tap_n - $3"
  fi
}

# skip DESCRIPTION REASON
skip() {
  tap_n=$((tap_n + 1))
  echo "ok $tap_n - $1 # SKIP $2"
}

done_testing() {
  echo "1..$tap_n"
  [ "$tap_bad" -eq 0 ]
  exit $?
}

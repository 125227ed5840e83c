#!/usr/bin/env bash
# install.sh VENV REQUIREMENTS WHAT: installs the pinned packages of REQUIREMENTS (WHAT, in
# words, for the messages) from PyPI into a virtual environment at VENV (cached: nothing happens
# when it is already complete).
#
# Several runs (two `make test` in two clones sharing ~/.cache/gpucap) may install the same
# VENV at once: an exclusive flock(1) on VENV.lock lets one build it while the others wait,
# and a run that gets the lock installs only if VENV is still not complete. A directory without
# VENV/.complete is never in use (the tests only use complete ones), so the holder of the lock
# may remove what a killed run left. On failure it leaves VENV.failed with the reason, which the
# framework rows report when they skip, and exits 0 so that `make test` goes on.
set -u
venv=$1
req=$2
what=$3
[ -n "$venv" ] || exit 0 # the rows of this environment are off
[ -f "$venv/.complete" ] && exit 0
mkdir -p "$(dirname "$venv")" || exit 0
fail() {
  { echo "$1"; tail -n 5 "$venv.log" 2>/dev/null; } > "$venv.failed"
  echo "frameworks: $1 (the rows that need $what will be skipped; details in $venv.failed)" >&2
  rm -rf "$venv"
  exit 0
}
if ! command -v flock >/dev/null; then
  echo "frameworks: flock (util-linux) is missing: cannot install $venv safely" >&2
  exit 0
fi
exec 9>"$venv.lock"
if ! flock -n 9; then
  echo "frameworks: waiting for another run installing $venv" >&2
  flock 9
fi
[ -f "$venv/.complete" ] && exit 0 # the other run finished it
rm -rf "$venv" "$venv.failed"
echo "frameworks: installing $(grep -c '==' "$req") pinned packages ($what) from" \
  "$(basename "$req") into $venv (once; then cached)" >&2
start=$(date +%s)
python3 -m venv "$venv" > "$venv.log" 2>&1 ||
  fail "python3 -m venv failed (Debian: apt-get install python3-venv)"
"$venv/bin/python" -m pip install --no-cache-dir --progress-bar off -q -r "$req" \
  >> "$venv.log" 2>&1 || fail "pip install -r $req failed (is PyPI reachable?)"
touch "$venv/.complete"
echo "frameworks: installed into $venv in $(($(date +%s) - start)) s," \
  "$(du -sh "$venv" 2>/dev/null | cut -f1)" >&2

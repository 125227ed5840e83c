#!/usr/bin/env bash
# Installs the frameworks of requirements.txt from PyPI into a virtual environment at $1 (cached:
# nothing happens when it is already complete). On failure it leaves $1.failed with the reason,
# which frameworks.sh reports when it skips, and exits 0 so that `make test` goes on.
set -u
venv=$1
req=$(dirname "$0")/requirements.txt
[ -f "$venv/.complete" ] && exit 0
rm -rf "$venv" "$venv.failed"
mkdir -p "$(dirname "$venv")"
fail() {
  { echo "$1"; tail -n 5 "$venv.log" 2>/dev/null; } > "$venv.failed"
  echo "frameworks: $1 (the framework tests will be skipped; details in $venv.failed)" >&2
  rm -rf "$venv"
  exit 0
}
echo "frameworks: installing $(grep -c '==' "$req") pinned packages (PyTorch, CuPy, numba-cuda," \
  "cuda-python; about 4 GB once, then cached) into $venv" >&2
python3 -m venv "$venv" > "$venv.log" 2>&1 ||
  fail "python3 -m venv failed (Debian: apt-get install python3-venv)"
"$venv/bin/python" -m pip install --progress-bar off -q -r "$req" >> "$venv.log" 2>&1 ||
  fail "pip install -r $req failed (is PyPI reachable?)"
touch "$venv/.complete"
echo "frameworks: installed into $venv" >&2

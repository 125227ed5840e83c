"""Shared helpers of the framework workloads: TAP lines and the expectations the runner passes
in the environment (EXPECT_TOTAL: the device memory the program should see, bytes)."""
import os
import sys

_failed = 0
_count = 0


def ok(cond, desc):
    global _failed, _count
    _count += 1
    if not cond:
        _failed += 1
    print(("ok" if cond else "not ok"), _count, "-", desc, flush=True)
    return cond


def expected_total():
    return int(os.environ["EXPECT_TOTAL"])


def done():
    print(f"1..{_count}", flush=True)
    sys.exit(1 if _failed else 0)

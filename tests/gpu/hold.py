"""Runs a framework workload (tests/frameworks/*_workload.py) as its own program, then holds
still for TEST_HOLD_MS milliseconds (if set) with the framework's caches emptied, before exiting with
the workload's status: a watcher outside (tests/gpu/gpuwatch) measures what the process holds
at its end beyond its allocations (context, modules, what the libraries keep).
usage: hold.py SCRIPT"""
import os
import runpy
import sys
import time

script = sys.argv[1]
sys.argv = [script]
status = 0
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as e:
    status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
hold = os.environ.get("TEST_HOLD_MS")
if hold:
    sys.stdout.flush()
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    if "cupy" in sys.modules:
        cupy = sys.modules["cupy"]
        cupy.cuda.Device().synchronize()
        cupy.get_default_memory_pool().free_all_blocks()
    time.sleep(int(hold) / 1000)
sys.exit(status)

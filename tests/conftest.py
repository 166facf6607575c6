"""Test session set-up: kernels compile into a fresh cache directory, so cache
counters and compile errors never depend on what an earlier run left behind."""
import os
import tempfile

os.environ["MKPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="mkpy-test-cache-")

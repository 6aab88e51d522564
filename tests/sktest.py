"""Tiny harness for the Python-side tests: check() prints PASS/FAIL lines that
tests/run_tests.sh counts; finish() exits non-zero if anything failed."""
import os, subprocess, sys

_failed = 0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
SKIPLM = os.environ.get("SKIPLM", os.path.join(BUILD, "skiplm"))


def check(cond, name):
    global _failed
    if cond:
        print("PASS " + name)
    else:
        _failed += 1
        print("FAIL " + name)
    sys.stdout.flush()
    return cond


def run_tool(tool, *args):
    """Run build/tests/<tool> with args; print its stderr on failure; True if it succeeded."""
    r = subprocess.run([os.path.join(BUILD, "tests", tool), *args], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr)
    return r.returncode == 0


def finish():
    sys.exit(1 if _failed else 0)

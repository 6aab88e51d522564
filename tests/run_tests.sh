#!/usr/bin/env bash
# Runs every C test binary and every scripted test; counts PASS/FAIL lines.
# A program that exits non-zero without printing a FAIL line counts as one failure; one that
# exits 0 with SKIP lines and no check (its external tool is absent) is counted as skipped.
set -u
BUILD=${BUILD:-build}
export SKIPLM="$PWD/$BUILD/skiplm" BUILD
export PY=${PY:-/usr/bin/python3}
pass=0; fail=0; skipped=0; failed_progs=()
log=$(mktemp)
run_one() {
    local name=$1; shift
    echo "== $name"
    "$@" >"$log" 2>&1; local rc=$?
    cat "$log"
    local p f
    p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $name exited with status $rc"; fi
    if [ "$rc" -eq 0 ] && [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
        if grep -q '^SKIP ' "$log"; then skipped=$((skipped + 1)); return; fi
        f=1; echo "FAIL $name ran no check"
    fi
    pass=$((pass + p)); fail=$((fail + f))
    [ "$f" -gt 0 ] && failed_progs+=("$name")
}
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for t in tests/test_*.py; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t")" "$PY" "$t"
done
for t in tests/test_*.sh; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t")" bash "$t"
done
rm -f "$log"
echo
[ ${#failed_progs[@]} -gt 0 ] && echo "failing: ${failed_progs[*]}"
echo "$pass passed, $fail failed$([ "$skipped" -gt 0 ] && echo ", $skipped programs skipped (SKIP above)")"
[ "$fail" -eq 0 ]

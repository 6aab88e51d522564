#!/usr/bin/env bash
# Build the libFuzzer harnesses (fuzz/fuzz_*.c, clang with ASan + UBSan, build-fuzz/) and run
# each for FUZZ_SECONDS (default 20) on a copy of its seed corpus fuzz/corpus/<name>/.
# A crash, leak, sanitizer report or timeout stops with the reproducer saved as
# build-fuzz/crashes/<name>-crash-* (replay: build-fuzz/fuzz/fuzz_<name> FILE).
# Usage: scripts/fuzz.sh [name...]   (names: json safetensors shard tok_char tok_gpt2 tok_hf config model hf jinja serve jsonl gguf json_grammar)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-20}
make --no-print-directory FUZZ=1 -j"${FUZZ_JOBS:-2}" fuzz-build >build-fuzz.log 2>&1 ||
    { tail -30 build-fuzz.log; echo "fuzz: build failed (needs clang with libFuzzer: scripts/install_deps.sh)"; exit 1; }
rm -f build-fuzz.log
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(json safetensors shard tok_char tok_gpt2 tok_hf config model hf jinja serve jsonl gguf json_grammar)
# longest input per harness: enough for the seeds plus room to grow
declare -A maxlen=([json]=4096 [safetensors]=4096 [shard]=4096 [tok_char]=4096 [tok_gpt2]=16384 [tok_hf]=16384
                   [config]=1024 [model]=16384 [hf]=2048 [jinja]=8192 [serve]=4096 [jsonl]=4096
                   [gguf]=20480 [json_grammar]=4096)
mkdir -p build-fuzz/crashes
status=0
ok=0 bad=0
for n in "${names[@]}"; do
    bin=build-fuzz/fuzz/fuzz_$n
    [ -x "$bin" ] || { echo "fuzz: no harness $bin"; status=1; bad=$((bad + 1)); continue; }
    work=build-fuzz/corpus/$n
    mkdir -p "$work"
    log=build-fuzz/fuzz_$n.log
    # new inputs go to the work corpus; the seeds in the repo stay as they are
    if "$bin" -max_total_time="$secs" -max_len="${maxlen[$n]:-4096}" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="build-fuzz/crashes/$n-" "$work" "fuzz/corpus/$n" >"$log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
        echo "fuzz $n: ok, $runs inputs in ${secs}s, $cov"
        ok=$((ok + 1))
    else
        status=1
        bad=$((bad + 1))
        echo "fuzz $n: FINDING (log $log)"
        grep -E 'ERROR|SUMMARY|runtime error|Test unit written|==[0-9]+==' "$log" | head -20
    fi
done
echo "fuzz: $ok passed, $bad failed"
exit $status

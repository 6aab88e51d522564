// Reference GPT-2 encoder for tests/test_tokenizer_node.py: npm gpt-3-encoder's encode().
//   node tests/ref/encode.js [--whole] FILE...   for each file (read as UTF-8): uint32 count,
//                                               then count int32 ids, little-endian, on stdout
//   node tests/ref/encode.js --classes          0x110000 bytes: 1 if /\p{L}/u, 2 if /\p{N}/u,
//                                               3 if /\s/u, else 0 (same as tool_tok classes)
//
// gpt-3-encoder's encode() appends with Array.concat per pre-token, which is quadratic in
// the length of the text (a 200 KB single-line file takes seconds). By default each file is
// therefore cut right before every " " or "\n" that is followed by a non-whitespace
// character, and the pieces are encoded separately. No regex match of
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// crosses such a cut, and every match ends the same way on both sides of it: text before
// the cut ends either in non-whitespace (matches stop there) or in a whitespace run that is
// cut where \s+(?!\S) would stop anyway; text after it starts with " X" or "\nX" which
// match exactly as in the whole text. --whole encodes each file in one call instead (the
// test checks that both agree on a few files).
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.resolve(__dirname, '..', '..');
const args = process.argv.slice(2);

function write(chunks) {
  const buf = Buffer.concat(chunks);
  let off = 0;
  while (off < buf.length) off += fs.writeSync(1, buf, off, buf.length - off);
}

if (args[0] === '--classes') {
  const out = Buffer.alloc(0x110000);
  const L = /^\p{L}$/u, N = /^\p{N}$/u, S = /^\s$/u;
  for (let cp = 0; cp < 0x110000; cp++) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const c = String.fromCodePoint(cp);
    out[cp] = L.test(c) ? 1 : N.test(c) ? 2 : S.test(c) ? 3 : 0;
  }
  write([out]);
  process.stderr.write(`node ${process.version} unicode ${process.versions.unicode}\n`);
  process.exit(0);
}

const { encode } = require(path.join(root, 'node_modules', 'gpt-3-encoder'));
let whole = false;
const files = [];
for (const a of args) { if (a === '--whole') whole = true; else files.push(a); }
const t0 = Date.now();
const chunks = [];
let bytes = 0, tokens = 0;
for (const f of files) {
  const text = fs.readFileSync(f, 'utf8');
  bytes += Buffer.byteLength(text);
  let ids = [];
  if (whole) ids = encode(text);
  else for (const piece of text.split(/(?=[ \n]\S)/u)) { for (const id of encode(piece)) ids.push(id); }
  const b = Buffer.alloc(4 + 4 * ids.length);
  b.writeUInt32LE(ids.length, 0);
  for (let i = 0; i < ids.length; i++) {
    if (typeof ids[i] !== 'number') throw new Error(`${f}: reference produced a non-id ${ids[i]}`);
    b.writeInt32LE(ids[i], 4 + 4 * i);
  }
  chunks.push(b);
  tokens += ids.length;
}
write(chunks);
process.stderr.write(`encode.js: ${bytes} bytes into ${tokens} tokens in ${(Date.now() - t0) / 1000} s${whole ? ' (whole files)' : ''}\n`);

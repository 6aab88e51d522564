// Reference for tests/test_hf_tokenizer.py: Hugging Face's tokenizer.json semantics, as
// implemented in JavaScript by npm @huggingface/tokenizers (the tokenizer of transformers.js).
//   node tests/ref/hf_tokenize.mjs encode TOKENIZER_JSON FILE...
//        for each file (read as UTF-8): uint32 count, then count int32 ids, little-endian,
//        on stdout: encode(text, add_special_tokens=false)
//   node tests/ref/hf_tokenize.mjs decode TOKENIZER_JSON FILE...
//        each file holds one such id record; for each: uint32 byte count, then the UTF-8 of
//        decode(ids) without clean-up of spaces and with special tokens kept
import fs from 'fs';
import path from 'path';
import { fileURLToPath } from 'url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const { Tokenizer } = await import(path.join(root, 'node_modules', '@huggingface', 'tokenizers', 'dist', 'tokenizers.mjs'));
const [mode, tokPath, ...files] = process.argv.slice(2);
if (!['encode', 'decode'].includes(mode) || !tokPath) {
  process.stderr.write('usage: hf_tokenize.mjs encode|decode TOKENIZER_JSON FILE...\n');
  process.exit(2);
}
const tok = new Tokenizer(JSON.parse(fs.readFileSync(tokPath, 'utf8')), {});
const t0 = Date.now();
const chunks = [];
let tokens = 0;
for (const f of files) {
  if (mode === 'encode') {
    const ids = tok.encode(fs.readFileSync(f, 'utf8'), { add_special_tokens: false }).ids;
    const b = Buffer.alloc(4 + 4 * ids.length);
    b.writeUInt32LE(ids.length, 0);
    ids.forEach((id, i) => {
      if (!Number.isInteger(id)) throw new Error(`${f}: reference produced a non-id ${id}`);
      b.writeInt32LE(id, 4 + 4 * i);
    });
    chunks.push(b);
    tokens += ids.length;
  } else {
    const rec = fs.readFileSync(f);
    const n = rec.readUInt32LE(0);
    const ids = Array.from({ length: n }, (_, i) => rec.readInt32LE(4 + 4 * i));
    const text = n ? tok.decode(ids, { clean_up_tokenization_spaces: false, skip_special_tokens: false }) : '';
    const b = Buffer.from(text, 'utf8');
    const len = Buffer.alloc(4);
    len.writeUInt32LE(b.length, 0);
    chunks.push(len, b);
  }
}
const out = Buffer.concat(chunks);
let off = 0;
while (off < out.length) off += fs.writeSync(1, out, off, out.length - off);
process.stderr.write(`hf_tokenize.mjs: ${mode} ${files.length} files (${tokens} tokens) in ${(Date.now() - t0) / 1000} s\n`);

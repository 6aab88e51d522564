// Hugging Face's own GGUF parser (npm @huggingface/gguf) on a local file: prints its metadata
// and its tensors' shapes and ggml types as JSON (tests/test_gguf.py compares them with what
// skiplm meant to write). Usage: node tests/ref/gguf_parse.mjs FILE.gguf
import { gguf } from "@huggingface/gguf";
import path from "node:path";

const file = path.resolve(process.argv[2]);
const { metadata, tensorInfos } = await gguf(file, { allowLocalFile: true });
const meta = {};
for (const [k, v] of Object.entries(metadata)) {
    meta[k] = typeof v === "bigint" ? Number(v) : Array.isArray(v) ? v.length : v;
}
const tensors = {};
for (const t of tensorInfos) tensors[t.name] = { shape: t.shape.map(Number), dtype: t.dtype };
process.stdout.write(JSON.stringify({ metadata: meta, tensors }));

// llama.cpp, through npm's node-llama-cpp (installed outside the repository: NODE_PATH or a
// node_modules above this script's working directory), as the oracle for GGUF files: loads
// a GGUF file on the CPU, tokenizes a prompt without special tokens, and decodes N tokens
// greedily (temperature 0). Prints JSON {"prompt": [ids], "tokens": [ids], "text": "..."}.
// Usage: node llamacpp_greedy.mjs MODEL.gguf PROMPT N
import { getLlama } from "node-llama-cpp";

const [file, prompt, n] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath: file });
const context = await model.createContext({ contextSize: 256, batchSize: 256, threads: 1 });
const seq = context.getSequence();
const ids = model.tokenize(prompt, false);
const out = [];
for await (const t of seq.evaluate(ids, { temperature: 0 })) {
    out.push(t);
    if (out.length >= Number(n)) break;
}
process.stdout.write(JSON.stringify({ prompt: Array.from(ids), tokens: out, text: model.detokenize(out) }));
await context.dispose();
await model.dispose();

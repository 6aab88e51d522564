// Tool calls of skiplm serve through OpenAI's official `openai` npm package (nobody here wrote
// it), each call's arguments checked by ajv against its tool's parameters, and a chat template
// rendered by Hugging Face's JS Jinja (@huggingface/jinja) and tokenized by the reference GPT-2
// encoder (gpt-3-encoder), to hold the server's prompt against.
// usage: node tools_client.mjs SPEC.json   (prints the results as JSON on stdout)
// SPEC: {"base_url", "requests": [...]}, each {"kind": "chat", "params": {...}}: per choice the
// content, finish_reason and tool_calls (streams joined from their deltas), whether each call's
// arguments are valid; usage. Or {"kind": "render", "template", "messages", "tools"}: the number
// of GPT-2 tokens of the template's text.
import fs from "node:fs";
import OpenAI from "openai";
import Ajv from "ajv";
import { Template } from "@huggingface/jinja";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const encoder = require("gpt-3-encoder");
const spec = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const client = new OpenAI({ baseURL: spec.base_url, apiKey: "none", maxRetries: 0, timeout: 120000 });
const ajv = new Ajv({ strict: false, allErrors: true });

function checkCalls(calls, tools) {
    return (calls ?? []).map((c) => {
        const t = tools.find((x) => x.function.name === c.function.name);
        if (!t) return { valid: false, why: `no tool ${c.function.name}` };
        let args;
        try { args = JSON.parse(c.function.arguments); } catch (e) { return { valid: false, why: `arguments not JSON: ${e.message}` }; }
        const v = ajv.compile(t.function.parameters ?? { type: "object" });
        return v(args) ? { valid: true } : { valid: false, why: ajv.errorsText(v.errors) };
    });
}

async function run(r) {
    try {
        if (r.kind === "render") {
            const text = new Template(r.template).render({ messages: r.messages, tools: r.tools, add_generation_prompt: true });
            return { tokens: encoder.encode(text).length, text };
        }
        const out = { content: [], finish: [], calls: [], checks: [], usage: null };
        if (r.params.stream) {
            for await (const ch of await client.chat.completions.create(r.params)) {
                if (ch.usage) out.usage = ch.usage;
                for (const c of ch.choices) {
                    const i = c.index;
                    if (c.delta.content) out.content[i] = (out.content[i] ?? "") + c.delta.content;
                    for (const d of c.delta.tool_calls ?? []) {
                        const calls = (out.calls[i] ??= []);
                        const k = d.index ?? calls.length;
                        calls[k] ??= { id: d.id, type: d.type, function: { name: "", arguments: "" } };
                        if (d.function?.name) calls[k].function.name += d.function.name;
                        if (d.function?.arguments) calls[k].function.arguments += d.function.arguments;
                    }
                    if (c.finish_reason) out.finish[i] = c.finish_reason;
                }
            }
        } else {
            const resp = await client.chat.completions.create(r.params);
            for (const c of resp.choices) {
                out.content[c.index] = c.message.content;
                out.finish[c.index] = c.finish_reason;
                out.calls[c.index] = c.message.tool_calls ?? null;
            }
            out.usage = resp.usage;
        }
        out.checks = out.calls.map((c) => checkCalls(c, r.params.tools ?? []));
        return out;
    } catch (e) {
        return { error: { status: e.status ?? null, message: String(e.message), param: e.param ?? null } };
    }
}

const results = [];
for (const r of spec.requests) results.push(await run(r));
process.stdout.write(JSON.stringify(results));

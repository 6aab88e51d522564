// Clients of skiplm serve's POST /v1/responses that nobody here wrote: OpenAI's official
// `openai` npm package (client.responses.create, streamed and not; client.chat.completions for
// the same conversation) and the Vercel AI SDK (`ai` with `@ai-sdk/openai`, whose provider
// called as a function, openai("model"), speaks the Responses API); ajv checks structured replies.
// usage: node responses_client.mjs SPEC.json   (prints the results as JSON on stdout)
// SPEC: {"base_url", "requests": [{"kind": "chat" | "responses" | "ai_generate" | "ai_stream",
//        "params": {...}, "schema": optional JSON Schema the text must satisfy}]}.
// Each result: {"text", "status", "usage", "events": [types, in order], "seq": [sequence numbers],
// "valid"}, or {"error": {"status", "message", "param", "code"}}.
import fs from "node:fs";
import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";
import Ajv from "ajv";

const spec = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const client = new OpenAI({ baseURL: spec.base_url, apiKey: "none", maxRetries: 0, timeout: 120000 });
const provider = createOpenAI({ baseURL: spec.base_url, apiKey: "none" });
const ajv = new Ajv({ strict: false, allErrors: true });

function valid(schema, text) {
    if (!schema) return null;
    try { return ajv.validate(schema, JSON.parse(text)) ? true : ajv.errorsText(); } catch (e) { return `not JSON: ${e.message}`; }
}

async function run(r) {
    const out = { text: "", status: null, usage: null, events: [], seq: [] };
    try {
        if (r.kind === "chat") {
            const c = await client.chat.completions.create(r.params);
            out.text = c.choices[0].message.content;
            out.status = c.choices[0].finish_reason;
            out.usage = c.usage;
        } else if (r.kind === "responses" && !r.params.stream) {
            const resp = await client.responses.create(r.params);
            out.text = resp.output_text;
            out.status = resp.status;
            out.usage = resp.usage;
            out.id = resp.id;
            out.incomplete = resp.incomplete_details;
        } else if (r.kind === "responses") {
            const stream = await client.responses.create(r.params);
            let deltas = "";
            for await (const ev of stream) {
                out.events.push(ev.type);
                out.seq.push(ev.sequence_number);
                if (ev.type === "response.output_text.delta") deltas += ev.delta;
                if (ev.type === "response.completed" || ev.type === "response.incomplete") {
                    out.text = ev.response.output_text ?? ev.response.output[0].content[0].text;
                    out.status = ev.response.status;
                    out.usage = ev.response.usage;
                }
            }
            out.deltas = deltas;
        } else {
            const args = { model: provider(r.params.model ?? "m"), system: r.params.system, prompt: r.params.prompt,
                           maxOutputTokens: r.params.max_tokens, temperature: r.params.temperature, maxRetries: 0 };
            if (r.kind === "ai_generate") {
                const g = await generateText(args);
                out.text = g.text;
                out.status = g.finishReason;
                out.usage = g.usage;
            } else {
                const s = streamText({ ...args, onError: ({ error }) => { out.error = { message: String(error?.message ?? error) }; } });
                for await (const t of s.textStream) out.text += t;
                out.status = await s.finishReason;
                out.usage = await s.usage;
            }
        }
        out.valid = valid(r.schema, out.text);
        return out;
    } catch (e) {
        return { error: { status: e.status ?? e.statusCode ?? null, message: String(e.message), param: e.param ?? null, code: e.code ?? null } };
    }
}

const results = [];
for (const r of spec.requests) results.push(await run(r));
process.stdout.write(JSON.stringify(results));

// Structured output of skiplm serve, checked by tools nobody here wrote: OpenAI's official
// `openai` npm package sends the requests (its zod helper, zodResponseFormat, makes the schema
// of a `chat.completions.parse` call and parses the reply), and ajv, a JSON Schema validator,
// checks every reply against its schema.
// usage: node structured_client.mjs SPEC.json   (prints the results as JSON on stdout)
// SPEC: {"base_url", "requests": [...]}, each request one of
//   {"kind": "chat" | "completion", "params": {...}, "schema": {...}}: the choices' texts,
//      finish reasons, and whether each text is JSON valid against schema (ajv's errors if not);
//   {"kind": "parse", "zod": "person" | "catalog", "params": {...}}: chat.completions.parse with
//      zodResponseFormat(that zod schema): the parsed object, and the schema the helper sent;
//   {"kind": "validate", "texts": [...], "schema": {...}}: ajv on texts made elsewhere.
// A request that fails gives {"error": {"status", "message", "param", "code"}}.
import fs from "node:fs";
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import Ajv from "ajv";

const spec = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const client = new OpenAI({ baseURL: spec.base_url, apiKey: "none", maxRetries: 0, timeout: 120000 });
const ajv = new Ajv({ strict: false, allErrors: true });

const zods = {
    person: z.object({
        name: z.string().max(8),
        age: z.number().int().min(0).max(120),
        kind: z.enum(["cat", "dog", "bird"]),
        nick: z.string().nullable(),
    }),
    catalog: z.object({
        items: z.array(z.object({ id: z.number().int().min(1).max(99), price: z.number().min(0).max(10), tags: z.array(z.enum(["a", "b"])).max(2) })).max(3),
        open: z.boolean(),
    }),
};

function check(schema, texts) {
    const validate = ajv.compile(schema);
    return texts.map((t) => {
        let v;
        try { v = JSON.parse(t); } catch (e) { return { valid: false, why: `not JSON: ${e.message}` }; }
        return validate(v) ? { valid: true } : { valid: false, why: ajv.errorsText(validate.errors) };
    });
}

async function run(r) {
    try {
        if (r.kind === "validate") return { checks: check(r.schema, r.texts) };
        if (r.kind === "parse") {
            const format = zodResponseFormat(zods[r.zod], r.zod);
            const resp = await client.chat.completions.parse({ ...r.params, response_format: format });
            const m = resp.choices[0].message;
            return { parsed: m.parsed, text: m.content, finish: resp.choices[0].finish_reason, sent: format.json_schema.schema };
        }
        const api = r.kind === "chat" ? client.chat.completions : client.completions;
        const texts = [], finish = [];
        if (r.params.stream) {
            const stream = await api.create(r.params);
            for await (const ch of stream)
                for (const c of ch.choices) {
                    const t = r.kind === "chat" ? c.delta.content : c.text;
                    texts[c.index] = (texts[c.index] ?? "") + (t ?? "");
                    if (c.finish_reason) finish[c.index] = c.finish_reason;
                }
        } else {
            const resp = await api.create(r.params);
            for (const c of resp.choices) {
                texts[c.index] = r.kind === "chat" ? c.message.content : c.text;
                finish[c.index] = c.finish_reason;
            }
        }
        return { texts, finish, checks: r.schema ? check(r.schema, texts) : [] };
    } catch (e) {
        return { error: { status: e.status ?? null, message: String(e.message), param: e.param ?? null, code: e.code ?? null } };
    }
}

const results = [];
for (const r of spec.requests) results.push(await run(r));
process.stdout.write(JSON.stringify(results));

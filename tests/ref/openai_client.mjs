// A client of skiplm serve that nobody here wrote: OpenAI's official `openai` npm package.
// usage: node openai_client.mjs SPEC.json   (prints the results as JSON on stdout)
// SPEC: {"base_url", "api_key", "mode": "serial" | "concurrent", "requests": [{"kind":
// "completion" | "chat" | "models", "params": {...}}]}. Each result: {"texts": [per choice],
// "finish": [per choice], "usage", "chunks", "logprobs": [per choice], "ids": [...]}, or
// {"error": {"status", "message", "code", "type"}}.
import fs from "node:fs";
import OpenAI from "openai";

const spec = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const client = new OpenAI({ baseURL: spec.base_url, apiKey: spec.api_key || "none", maxRetries: 0, timeout: 120000 });

function put(out, i, key, v) {
    while (out[key].length <= i) out[key].push(key === "texts" ? "" : null);
    out[key][i] = key === "texts" ? out[key][i] + v : v;
}

async function run(r) {
    const out = { texts: [], finish: [], logprobs: [], usage: null, chunks: 0, ids: [] };
    try {
        if (r.kind === "models") {
            const list = await client.models.list();
            out.ids = list.data.map((m) => m.id);
            return out;
        }
        const api = r.kind === "chat" ? client.chat.completions : client.completions;
        const resp = await api.create(r.params);
        if (!r.params.stream) {
            for (const c of resp.choices) {
                put(out, c.index, "texts", r.kind === "chat" ? c.message.content : c.text);
                put(out, c.index, "finish", c.finish_reason);
                put(out, c.index, "logprobs", c.logprobs);
            }
            out.usage = resp.usage;
            out.id = resp.id;
            return out;
        }
        for await (const ch of resp) {
            out.chunks++;
            if (ch.usage) out.usage = ch.usage;
            for (const c of ch.choices) {
                const t = r.kind === "chat" ? c.delta.content : c.text;
                if (t) put(out, c.index, "texts", t);
                else put(out, c.index, "texts", "");
                if (c.finish_reason) put(out, c.index, "finish", c.finish_reason);
                if (c.logprobs) {
                    while (out.logprobs.length <= c.index) out.logprobs.push([]);
                    out.logprobs[c.index] = (out.logprobs[c.index] || []).concat(
                        r.kind === "chat" ? c.logprobs.content : c.logprobs.tokens);
                }
            }
        }
        return out;
    } catch (e) {
        return { error: { status: e.status ?? null, message: String(e.message), code: e.code ?? null, type: e.type ?? null } };
    }
}

const results = [];
if (spec.mode === "concurrent") {
    results.push(...(await Promise.all(spec.requests.map(run))));
} else {
    for (const r of spec.requests) results.push(await run(r));
}
process.stdout.write(JSON.stringify(results));

// Completions with logprobs through OpenAI's official `openai` npm package (nobody here wrote
// it): each choice's text, finish reason and logprobs object as the client hands them over,
// joined across the chunks of a stream.
// usage: node logprobs_client.mjs SPEC.json   (SPEC: {"base_url", "requests": [params...]})
import fs from "node:fs";
import OpenAI from "openai";

const spec = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const client = new OpenAI({ baseURL: spec.base_url, apiKey: "none", maxRetries: 0, timeout: 120000 });
const keys = ["tokens", "token_logprobs", "top_logprobs", "text_offset"];
const results = [];
for (const params of spec.requests) {
    try {
        const out = { texts: [], finish: [], logprobs: [], usage: null };
        const add = (c) => {
            out.texts[c.index] = (out.texts[c.index] ?? "") + (c.text ?? "");
            if (c.finish_reason) out.finish[c.index] = c.finish_reason;
            if (!c.logprobs) return;
            const l = (out.logprobs[c.index] ??= Object.fromEntries(keys.map((k) => [k, []])));
            for (const k of keys) l[k].push(...c.logprobs[k]);
        };
        const resp = await client.completions.create(params);
        if (params.stream) {
            for await (const ch of resp) { ch.choices.forEach(add); if (ch.usage) out.usage = ch.usage; }
        } else {
            resp.choices.forEach(add);
            out.usage = resp.usage;
        }
        results.push(out);
    } catch (e) {
        results.push({ error: { status: e.status ?? null, message: String(e.message) } });
    }
}
process.stdout.write(JSON.stringify(results));

// Renders Jinja templates with @huggingface/jinja (the JS port transformers.js uses for chat
// templates), as the reference for tests/test_jinja.py.
// usage: node tests/ref/jinja_render.mjs CASES.json OUT.json
// CASES.json: [{"template": "...", "context": {...}}, ...]
// OUT.json:   [{"ok": "rendering"} | {"error": "message"}, ...]
// Template itself applies trim_blocks and lstrip_blocks (as transformers does) and provides the
// raise_exception and strftime_now globals (strftime_now reads the clock: pass date_string, or
// give a case "now" (Unix seconds) to fix the clock for it; run with TZ=UTC).
import { readFileSync, writeFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const [, , inPath, outPath] = process.argv;
const cases = JSON.parse(readFileSync(inPath, "utf8"));
const RealDate = Date;
const out = cases.map((c) => {
  globalThis.Date = c.now === undefined ? RealDate : class extends RealDate {
    constructor(...a) { super(...(a.length ? a : [c.now * 1000])); }
  };
  try {
    const t = new Template(c.template);
    return { ok: t.render(c.context) };
  } catch (e) {
    return { error: String(e && e.message ? e.message : e) };
  }
});
writeFileSync(outPath, JSON.stringify(out));

// The chat page of skiplm serve (GET /) in a real browser: Debian's chromium, headless, driven by
// puppeteer-core (npm). usage: node chat_page.mjs CHROMIUM URL OUTDIR
// Sets the sampling fields (temperature 0, max tokens 12), sends a message, waits for the reply
// to stream in and finish; screenshots before and after; then sends a second message with a long
// reply and presses Stop while it streams. Prints JSON: {"reply", "state", "chunks" (the reply's
// lengths seen while it grew), "changed" (the screenshots differ), "stopped_state", "stopped_len",
// "title", "model", "errors" (the page's console errors)}.
import fs from "node:fs";
import path from "node:path";
import puppeteer from "puppeteer-core";

const [chromium, url, outdir] = process.argv.slice(2);
const browser = await puppeteer.launch({
    executablePath: chromium, headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check"],
});
const out = { errors: [] };
try {
    const page = await browser.newPage();
    page.on("console", (m) => { if (m.type() === "error") out.errors.push(m.text()); });
    page.on("pageerror", (e) => out.errors.push(String(e)));
    await page.setViewport({ width: 900, height: 600 });
    await page.goto(url, { waitUntil: "networkidle0" });
    out.title = await page.title();
    await page.waitForFunction(() => !document.getElementById("model").textContent.includes("..."));
    out.model = await page.$eval("#model", (e) => e.textContent);
    const before = path.join(outdir, "before.png"), after = path.join(outdir, "after.png");
    await page.screenshot({ path: before });
    const set = async (id, v) => { await page.$eval(id, (e) => { e.value = ""; }); await page.type(id, v); };
    await set("#temperature", "0");
    await set("#max_tokens", "12");
    await page.type("#input", "Hello there");
    // record the reply's length each time it changes, while it streams
    await page.evaluate(() => {
        window.__lens = [];
        new MutationObserver(() => {
            const r = document.getElementById("reply");
            if (r) window.__lens.push(r.textContent.length);
        }).observe(document.getElementById("log"), { childList: true, subtree: true, characterData: true });
    });
    await page.click("#send");
    await page.waitForFunction(() => document.body.dataset.state && document.body.dataset.state !== "streaming", { timeout: 60000 });
    out.state = await page.evaluate(() => document.body.dataset.state);
    out.reply = await page.$eval("#reply", (e) => e.textContent);
    out.chunks = await page.evaluate(() => window.__lens);
    await page.screenshot({ path: after });
    out.changed = !fs.readFileSync(before).equals(fs.readFileSync(after));
    // a long reply, stopped while it streams
    await set("#max_tokens", "900");
    await set("#temperature", "1");
    await page.type("#input", "Tell me more");
    await page.click("#send");
    await page.waitForFunction(() => (document.getElementById("reply")?.textContent.length ?? 0) > 0 && document.body.dataset.state === "streaming",
                               { timeout: 60000 });
    await page.click("#stop");
    await page.waitForFunction(() => document.body.dataset.state !== "streaming", { timeout: 30000 });
    out.stopped_state = await page.evaluate(() => document.body.dataset.state);
    out.stopped_len = await page.$eval("#reply", (e) => e.textContent.length);
    out.send_enabled = await page.$eval("#send", (e) => !e.disabled);
} catch (e) {
    out.error = String(e && e.stack || e);
} finally {
    await browser.close();
}
process.stdout.write(JSON.stringify(out));

"""POST /v1/responses (OpenAI's Responses API) on `skiplm serve`, driven by clients nobody here
wrote (tests/ref/responses_client.mjs): the official `openai` npm package's
client.responses.create, streamed and not, and the Vercel AI SDK's generateText and streamText
through @ai-sdk/openai's default provider, which speaks the Responses API; ajv checks the JSON.

1. input as a string with instructions: the reply equals the chat completion of the same
   conversation (system + user message, greedy), with max_output_tokens; status "incomplete"
   with reason max_output_tokens when it cuts the reply; usage in input/output tokens;
2. streamed: the events in their order (response.created, response.in_progress,
   response.output_item.added, response.content_part.added, response.output_text.delta ...,
   response.output_text.done, response.content_part.done, response.output_item.done,
   response.incomplete), numbered 0, 1, ...; the deltas joined are the text;
3. input as message items (a developer message, text parts): the same reply as the chat;
4. text.format json_schema: the reply is JSON valid against the schema (ajv), status completed;
5. the AI SDK: generateText and streamText reply what the chat does, through /v1/responses;
6. bad requests: a wrong type names max_output_tokens; tools, previous_response_id and a missing
   input are refused with 400 naming them."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sktest import ROOT, check, finish  # noqa: E402
from test_serve import Server, clean, curl, make_model  # noqa: E402

CLIENT = os.path.join(HERE, "ref", "responses_client.mjs")
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"], "additionalProperties": False}


def client(srv, requests):
    spec = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"base_url": srv.url + "/v1", "requests": requests}, spec)
    spec.close()
    r = subprocess.run(["node", CLIENT, spec.name], capture_output=True, text=True, timeout=120, cwd=ROOT)
    os.unlink(spec.name)
    if r.returncode != 0:
        print(r.stderr[-2000:])
        return [{"error": {"message": "client failed"}}] * len(requests)
    return json.loads(r.stdout)


def main():
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "m")
    if not check(make_model(model, "--n_layer", "2", "--n_head", "2", "--n_embd", "32", "--block_size", "256", scale=8.0),
                 "a model of random weights with GPT-2's vocabulary and a chat template"):
        finish()
    srv = Server(model, "--parallel", "2", "--alias", "m")
    if not check(srv.port is not None, f"the server starts ({srv.log()[-300:]})"):
        finish()
    try:
        system, question, n = "You are terse.", "Name a river.", 12
        chat = {"kind": "chat", "params": {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
                                           "max_tokens": n, "temperature": 0}}
        plain = {"model": "m", "instructions": system, "input": question, "max_output_tokens": n, "temperature": 0}
        items = {"model": "m", "max_output_tokens": n, "temperature": 0,
                 "input": [{"role": "developer", "content": system}, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]}]}
        fmt = {"model": "m", "input": "A person", "max_output_tokens": 60, "temperature": 0.8, "seed": 5,
               "text": {"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}}}
        ai = {"model": "m", "system": system, "prompt": question, "max_tokens": n, "temperature": 0}
        got = client(srv, [chat, {"kind": "responses", "params": plain}, {"kind": "responses", "params": {**plain, "stream": True}},
                           {"kind": "responses", "params": items}, {"kind": "responses", "params": fmt, "schema": PERSON},
                           {"kind": "ai_generate", "params": ai}, {"kind": "ai_stream", "params": ai}])
        want, resp, stream, item, structured, gen, st = got
        text = want.get("text")
        check(text and resp.get("text") == text and resp.get("status") == "incomplete" and resp.get("incomplete", {}).get("reason") == "max_output_tokens" and
              resp["usage"]["input_tokens"] == want["usage"]["prompt_tokens"] and resp["usage"]["output_tokens"] == n and resp["id"].startswith("resp_"),
              f"responses.create: the chat's reply ({resp.get('text')!r:.60} vs {text!r:.60}), incomplete at max_output_tokens, its usage")
        order = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
        ev = stream.get("events", [])
        deltas = [e for e in ev[4:-4] if e == "response.output_text.delta"]
        check(ev[:4] == order and len(deltas) == len(ev) - 8 and deltas and
              ev[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"] and
              stream.get("seq") == list(range(len(ev))),
              f"responses.create streamed: the events in order, numbered from 0 ({ev[:5]}...{ev[-4:]})")
        check(stream.get("deltas") == text and stream.get("text") == text and stream.get("usage", {}).get("output_tokens") == n,
              f"streamed: the deltas joined and the final response are the chat's reply ({stream.get('deltas')!r:.60})")
        check(item.get("text") == text, f"input as message items (developer, input_text parts): the same reply ({item.get('text', item)!r:.60})")
        check(structured.get("valid") is True and structured.get("status") == "completed",
              f"text.format json_schema: JSON valid against the schema (ajv), completed ({structured.get('text', structured)!r:.80}; {structured.get('valid')})")
        check(gen.get("text") == text and st.get("text") == text and gen.get("status") == "length",
              f"the AI SDK (@ai-sdk/openai's default provider): generateText and streamText reply the chat's text "
              f"({gen.get('text', gen)!r:.50}; {st.get('text', st)!r:.50})")
        log = srv.log()
        check(log.count("POST /v1/responses 200") == 6, f"those went through POST /v1/responses ({log.count('POST /v1/responses 200')})")
        for body, param in (({"input": "a", "max_output_tokens": "ten"}, "max_output_tokens"),
                            ({"input": "a", "tools": [{"type": "function", "name": "f"}]}, "tools"),
                            ({"input": "a", "previous_response_id": "resp_1"}, "previous_response_id"), ({"instructions": "x"}, "input"),
                            ({"input": "a", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "string", "pattern": "a"}}}}, "text.format")):
            code, out = curl(srv, "/v1/responses", body)
            e = json.loads(out).get("error", {}) if out.startswith("{") else {}
            check(code == 400 and e.get("param") == param and e.get("message"),
                  f"a bad request ({list(body)[-1]}): 400 naming {param} ({e.get('message', out)[:90]})")
        check("'max_output_tokens' must be an integer" in srv.log(), "the error's message names max_output_tokens too")
    finally:
        check(srv.stop() == 0, "the server exits 0")
    clean(srv)
    finish()


if __name__ == "__main__":
    main()

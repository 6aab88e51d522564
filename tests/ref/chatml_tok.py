"""A small chat tokenizer folder for the SFT tests and scripts/sft_demo.py: a byte-level BPE
learned by `skiplm tokenizer train` on some text, written as a Hugging Face tokenizer.json
with <|im_start|>, <|im_end|> and <|endoftext|> as added special tokens, a ChatML
chat_template.jinja and a tokenizer_config.json naming <|im_end|> the eos_token.

    build(folder, skiplm, text, vocab_size) -> the folder     (text: a file or a folder)
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPECIALS = ["<|im_start|>", "<|im_end|>"]


def build(folder, skiplm, text, vocab_size):
    bpe = folder + ".bpe"
    args = [skiplm, "tokenizer", "train", text, "--vocab-size", str(vocab_size), "--out", bpe]
    for s in SPECIALS:
        args += ["--special", s]
    subprocess.run(args, check=True, capture_output=True)
    vocab = json.load(open(os.path.join(bpe, "encoder.json"), encoding="utf-8"))
    merges = [l.rstrip("\n") for l in open(os.path.join(bpe, "vocab.bpe"), encoding="utf-8") if not l.startswith("#version")]
    merges = [m for m in merges if m]
    added = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t in SPECIALS + ["<|endoftext|>"]]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
          "post_processor": None,
          "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                    "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                    "vocab": vocab, "merges": merges}}
    os.makedirs(folder, exist_ok=True)
    json.dump(tj, open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
    open(os.path.join(folder, "chat_template.jinja"), "w").write(CHATML)
    json.dump({"eos_token": "<|im_end|>", "bos_token": None}, open(os.path.join(folder, "tokenizer_config.json"), "w"))
    return folder

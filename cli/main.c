/* skiplm: train, evaluate and sample GPT-style models with Skip-Layer Attention. */
#include "cli.h"
#include <signal.h>
#include <stdio.h>
#include <string.h>

typedef struct { const char *name; int (*fn)(int, char **); const char *help; } command;

/* Weak defaults let the table name commands that a build may leave out. */
#define WEAK __attribute__((weak))
WEAK int cmd_prepare(int argc, char **argv);
WEAK int cmd_train(int argc, char **argv);
WEAK int cmd_sample(int argc, char **argv);
WEAK int cmd_chat(int argc, char **argv);
WEAK int cmd_bench(int argc, char **argv);
WEAK int cmd_plot(int argc, char **argv);
WEAK int cmd_tokenizer(int argc, char **argv);

static const command COMMANDS[] = {
    {"prepare", cmd_prepare, "tokenize a text file or folder into train/val token shards"},
    {"train", cmd_train, "train a model (from scratch or from a checkpoint), with resume"},
    {"eval", cmd_eval, "loss and perplexity of a weights file on a token shard"},
    {"sample", cmd_sample, "generate text from a model (KV cache)"},
    {"chat", cmd_chat, "converse with a chat model (its chat template; one message per line)"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server (completions, chat, streaming, batching)"},
    {"init", cmd_init, "write a randomly initialised model"},
    {"export", cmd_export, "write a model as a Hugging Face folder (transformers' from_pretrained)"},
    {"quantize", cmd_quantize, "write a model with 8-bit weights (q8_0) for faster CPU decoding"},
    {"info", cmd_info, "describe a preset, a config or a weights file: sizes, memory, the routing plan per layer"},
    {"bench", cmd_bench, "measure training and generation speed"},
    {"plot", cmd_plot, "draw loss curves of one or more runs as SVG"},
    {"tokenizer", cmd_tokenizer, "train a byte-level BPE vocabulary (tokenizer train)"},
};

int main(int argc, char **argv) {
    signal(SIGXFSZ, SIG_IGN);   /* a file-size limit shows up as a write error, not a kill */
    if (argc >= 2) {
        for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
            if (!strcmp(argv[1], COMMANDS[i].name) && COMMANDS[i].fn)
                return COMMANDS[i].fn(argc - 1, argv + 1);
    }
    FILE *out = argc >= 2 && strcmp(argv[1], "--help") && strcmp(argv[1], "help") ? stderr : stdout;
    if (out == stderr) fprintf(stderr, "skiplm: unknown command '%s'\n\n", argv[1]);
    fprintf(out, "usage: skiplm COMMAND [options]   (skiplm COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (COMMANDS[i].fn) fprintf(out, "  %-8s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    return argc >= 2 && out == stdout ? 0 : 2;
}

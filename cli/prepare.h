/* skiplm prepare's parts: the inputs as a stream of pieces of text (prepare_input.c), the
 * tokens into shards (prepare_shards.c), conversations into tokens and a loss mask
 * (prepare_chat.c), synthetic tasks (prepare_synthetic.c); cmd_prepare.c runs them
 * (docs/data.md). */
#ifndef SK_PREPARE_H
#define SK_PREPARE_H
#include "cli.h"
#include <stdint.h>

/* ------------------------------------------------------------------ inputs */

typedef enum { PIECE_TEXT, PIECE_JSONL, PIECE_CHAT } piece_kind;

/* A piece of the input: a whole document, a stretch of a long text file (cut after a
 * newline), or one JSONL line (its text field, or a conversation, is taken out by the
 * encoder, so that both cores parse). */
typedef struct {
    char *data; size_t len;  /* malloc'd, NUL-terminated */
    piece_kind kind;
    int doc_start;           /* 1: a document starts here (the end-of-text token goes before it) */
    char where[512];         /* "FILE" or "FILE:LINE", for messages */
} prep_piece;

typedef struct prep_source prep_source;
/* The inputs: files, folders (their *.txt, *.jsonl, *.txt.gz, *.jsonl.gz files, recursively,
 * sorted; all regular files if none), "-" for stdin. A name ending .jsonl(.gz) is JSON Lines
 * (chat: conversations), else text; stdin is text unless jsonl. Text pieces are at most
 * piece_max bytes. 0, or an error naming the input. */
int prep_source_open(prep_source **s, char *const *inputs, int n, int is_default, int jsonl_stdin, int chat,
                     size_t piece_max);
/* The next piece: 1, 0 at the end, or -1 on error (sk_last_error names the file and line). */
int prep_source_next(prep_source *s, prep_piece *p);
/* Input bytes read so far, and the total (0 when unknown: stdin, a pipe). Compressed files
 * count their compressed bytes. */
uint64_t prep_source_done(const prep_source *s);
uint64_t prep_source_total(const prep_source *s);
/* Rewind to the first input (a second pass: the char vocabulary); -1 for stdin. */
int prep_source_rewind(prep_source *s);
void prep_source_close(prep_source *s);
/* 1 when this build reads .gz files (zlib). */
int prep_have_zlib(void);

/* ------------------------------------------------------------------ shards */

typedef struct prep_writer prep_writer;
/* Tokens of version `version` into dir: shard_size 0 writes the single-file layout
 * (train.bin, val.bin) unless a stream outgrows auto_max tokens, which switches to shards of
 * auto_max; shard_size > 0 writes dir/train_000000.bin, ..., dir/val_000000.bin, ... of that
 * many tokens (the last of each shorter). with_mask: a loss mask beside each shard. */
int prep_writer_open(prep_writer **w, const char *dir, size_t shard_size, size_t auto_max, int version, int with_mask);
/* Append n tokens (and their mask entries when with_mask) to the train or val stream. */
int prep_writer_add(prep_writer *w, int val, const int32_t *ids, const uint8_t *mask, size_t n);
/* Write what is left, and remove token files of an earlier prepare in the folder that this
 * one did not write (train --data reads every shard there). The counts of tokens, masked-in
 * tokens and files of each stream. */
typedef struct { uint64_t tokens[2], masked[2]; int files[2], sharded; } prep_written;
int prep_writer_finish(prep_writer *w, prep_written *out);
/* After a failure: remove the files this run wrote. They are written into dir/.prepare.PID/
 * and moved into dir only by prep_writer_finish, so a failed run leaves dir as it was. */
void prep_writer_abort(prep_writer *w);
void prep_writer_free(prep_writer *w);

/* ------------------------------------------------------------------ synthetic tasks */

/* skiplm prepare --synthetic mqar (prepare_synthetic.c): its own options; the exit status. */
int prep_synthetic(int argc, char **argv);

/* ------------------------------------------------------------------ chat */

/* A conversation (one JSONL line, `field` its messages) rendered with the chat template and
 * encoded: *ids and *mask (appended to growing arrays, *n used, *cap allocated), mask 1 on
 * the tokens of every assistant reply (its end-of-turn included), 0 elsewhere. */
int prep_chat_encode(const sk_chat *ct, sk_tokenizer *tok, const char *line, size_t len, const char *field,
                     int32_t **ids, uint8_t **mask, size_t *n, size_t *cap);
#endif

/* libFuzzer harness for the JSON Lines record readers (sk_jsonl_text, sk_jsonl_messages),
 * which prepare runs on every line of a .jsonl input, and sk_jsonl_choices (eval --choices'
 * items: an accepted item has a context, at least two endings and a label in range). The first byte picks the field name;
 * the rest is the line. A record accepted must give a NUL-terminated string of the stated
 * length; a conversation, n > 0 messages whose role and content strings are readable (the
 * block is one allocation: ASan sees any overrun); a refusal leaves the outputs empty and says
 * why. */
#include "fuzz_util.h"
#include "skiplm.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const char *const fields[] = {"text", "messages", "content", ""};
    const char *field = fields[data[0] % 4];
    const char *line = (const char *)data + 1;
    size_t len = size - 1;
    char *text = (char *)1;
    size_t tl = 7;
    if (sk_jsonl_text(line, len, field, &text, &tl) == 0) {
        if (!text || text[tl] != 0) abort();
        volatile size_t sum = 0;
        for (size_t i = 0; i < tl; i++) sum += (unsigned char)text[i];
        free(text);
    } else if (text || tl || !*sk_last_error()) abort();
    sk_chat_msg *m = (sk_chat_msg *)1;
    int n = -1;
    if (sk_jsonl_messages(line, len, field, &m, &n) == 0) {
        if (!m || n <= 0) abort();
        volatile size_t sum = 0;
        for (int i = 0; i < n; i++) sum += strlen(m[i].role) + strlen(m[i].content);
        free(m);
    } else if (m || n || !*sk_last_error()) abort();
    sk_mc_item it;
    if (sk_jsonl_choices(line, len, &it) == 0) {
        if (!it.context || it.context[it.context_len] != 0 || it.n_endings < 2 || it.label < 0 || it.label >= it.n_endings) abort();
        for (int i = 0; i < it.n_endings; i++)
            if (it.endings[i][it.ending_lens[i]] != 0) abort();
        sk_mc_item_free(&it);
    } else if (it.context || it.endings || it.n_endings || !*sk_last_error()) abort();
    return 0;
}

/* Jinja2 template renderer (internal), enough for Hugging Face chat templates: renders a
 * tokenizer's `chat_template` as transformers' apply_chat_template does (jinja2's
 * ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension,
 * raise_exception/strftime_now globals and json.dumps-style tojson), in src/text/jinja_*.c. See
 * jinja_internal.h for what is supported and what is not. */
#ifndef SK_JINJA_H
#define SK_JINJA_H
#include <stddef.h>
#include <time.h>

#include "base/json.h"

typedef struct sk_jinja sk_jinja;

/* Parse a template (len bytes, UTF-8). 0 on success; else non-zero with a message naming the
 * line in err. */
int sk_jinja_parse(sk_jinja **out, const char *src, size_t len, char *err, size_t errlen);
/* Render with ctx, a JSON object whose members are the template's variables (messages,
 * add_generation_prompt, bos_token, eos_token, tools, ...). now: the time strftime_now formats
 * (local time, as Python's datetime.now()). *out is malloc'd and NUL-terminated, *out_len its
 * length. On error (raise_exception, a type error, limits) non-zero with the message in err and
 * *out NULL. A raise_exception message is copied to err as is; other errors name the line. */
int sk_jinja_render(const sk_jinja *t, const sk_json *ctx, time_t now, char **out, size_t *out_len,
                    char *err, size_t errlen);
void sk_jinja_free(sk_jinja *t);
#endif

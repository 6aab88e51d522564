/* Helper for tests/test_nfc.py: tool_nfc IN OUT. IN holds records (uint32 byte count, then
 * the bytes, little-endian); OUT gets each record's NFC (src/text/nfc.c) the same way. */
#include "text/nfc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: tool_nfc IN OUT\n"); return 2; }
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    if (!in || !out) { perror("tool_nfc"); return 2; }
    uint32_t len;
    uint8_t *buf = NULL;
    size_t cap = 0;
    while (fread(&len, 4, 1, in) == 1) {
        if (len + 1 > cap) { cap = 2 * (len + 1); buf = realloc(buf, cap); if (!buf) return 2; }
        if (fread(buf, 1, len, in) != len) { fprintf(stderr, "tool_nfc: truncated record\n"); return 2; }
        uint8_t *o; size_t on;
        if (sk_nfc(buf, len, &o, &on)) { fprintf(stderr, "tool_nfc: out of memory\n"); return 2; }
        uint32_t ol = (uint32_t)on;
        fwrite(&ol, 4, 1, out);
        fwrite(o, 1, on, out);
        free(o);
    }
    free(buf);
    return fclose(out) ? 2 : 0;
}

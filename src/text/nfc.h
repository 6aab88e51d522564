/* Unicode normalization form C (src/text/nfc.c). */
#ifndef SK_NFC_H
#define SK_NFC_H
#include <stddef.h>
#include <stdint.h>

/* The NFC of the UTF-8 text s[0..n) into *out (malloc'd, the caller frees) of *out_n bytes.
 * Bytes that are not well-formed UTF-8 pass through unchanged. SK_OK or SK_ENOMEM. */
int sk_nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *out_n);

#endif

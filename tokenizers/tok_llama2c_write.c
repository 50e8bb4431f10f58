/* tok_llama2c_write.c — writes a minimal llama2.c tokenizer.bin for models made
 * from scratch: <unk>, BOS, EOS, the 256 byte-fallback pieces <0x00>..<0xFF>
 * (ids 3..258, as llama2.c expects) and the 95 printable ASCII characters
 * (ids 259..353), so text round-trips byte for byte. Written atomically
 * through mp_out (mp_common.h). */
#include "tok_llama2c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BYTELEVEL_VOCAB (3 + 256 + 95)

int mp_tokenizer_bytelevel_vocab(void) { return BYTELEVEL_VOCAB; }

static int put_piece(FILE *f, const char *s, int len, float score) {
    return fwrite(&score, sizeof score, 1, f) == 1 && fwrite(&len, sizeof len, 1, f) == 1 &&
           fwrite(s, 1, (size_t)len, f) == (size_t)len;
}

mp_status mp_tokenizer_save_bytelevel(const char *path) {
    mp_out out;
    mp_status st = mp_out_begin(&out, path);
    if (st != MP_OK) return st;
    FILE *f = mp_out_fdopen(&out);
    if (!f) { mp_out_abort(&out); return MP_ERR_IO; }
    int max_len = 6, ok = fwrite(&max_len, sizeof max_len, 1, f) == 1;
    ok = ok && put_piece(f, "<unk>", 5, 0.0f) && put_piece(f, "\n<s>\n", 5, 0.0f) && put_piece(f, "\n</s>\n", 6, 0.0f);
    for (int b = 0; b < 256 && ok; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        ok = put_piece(f, s, 6, 0.0f);
    }
    for (int c = 32; c < 127 && ok; c++) {
        char s = (char)c;
        ok = put_piece(f, &s, 1, 0.0f);
    }
    if (!ok) {
        int e = errno;
        mp_out_abort(&out);
        return mp_error(MP_ERR_IO, "%s: cannot write: %s", path, strerror(e));
    }
    return mp_out_commit(&out, 0);
}

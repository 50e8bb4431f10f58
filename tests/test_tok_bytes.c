/* test_tok_bytes.c — the raw-bytes tokenizer kind (mp_tok_new_bytes): ids
 * 0..255 are the bytes and 256 BOS; encoding every byte value (NUL included)
 * and decoding it back is exact; no EOS (asking for one is refused); decoding
 * skips ids outside 0..255; streaming pieces; vocabulary spellings (GPT-2's
 * byte map) and lookups; and the same ids as the independent path through the
 * byte vocabulary a "bytes" model's GGUF export carries (read back as a
 * byte-level BPE tokenizer). */
#include "tok.h"
#include "formats.h"
#include "model.h"
#include "quant.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void) {
    mp_init();
    mp_tok *t = NULL;
    CHECK(mp_tok_new_bytes(&t) == MP_OK, "%s", mp_last_error());
    if (!t) return tu_finish("test_tok_bytes");
    CHECK(mp_tok_get_kind(t) == MP_TOK_KIND_BYTES && mp_tok_vocab(t) == 257 && mp_tok_bos(t) == 256 &&
              mp_tok_eos(t) == -1 && mp_tok_add_bos(t) == 1 && mp_tok_add_eos(t) == 0 && mp_tok_pre(t) == NULL,
          "kind, vocab 257, BOS 256, no EOS, adds BOS");

    /* every byte value, NUL included, with BOS */
    char all[256];
    for (int i = 0; i < 256; i++) all[i] = (char)i;
    int *ids = NULL, n = 0;
    CHECK(mp_tok_encode(t, all, 256, MP_TOK_BOS, &ids, &n) == MP_OK && n == 257, "%s (n %d)", mp_last_error(), n);
    int ok = ids && ids[0] == 256;
    for (int i = 0; ok && i < 256; i++) ok = ids[i + 1] == i;
    CHECK(ok, "ids are BOS then the byte values");
    char *text = NULL;
    size_t len = 0;
    CHECK(ids && mp_tok_decode(t, ids, n, &text, &len) == MP_OK && len == 256 && memcmp(text, all, 256) == 0 &&
              text[256] == '\0', "decode(encode(all bytes)) == all bytes");
    free(text);
    free(ids);

    /* no EOS: refused, as for any vocabulary without one */
    ids = NULL;
    CHECK(mp_tok_encode(t, "ab", 2, MP_TOK_EOS, &ids, &n) == MP_ERR_ARG && strstr(mp_last_error(), "no EOS") &&
              ids == NULL, "EOS refused: %s", mp_last_error());
    CHECK(mp_tok_encode(t, "", 0, 0, &ids, &n) == MP_OK && n == 0 && ids == NULL, "empty text, no BOS: no ids");

    /* decoding skips ids outside 0..255 (BOS, unused ids of a larger model vocabulary, negatives) */
    int mixed[] = {256, 72, 300, -1, 257, 105, 0, 33};
    CHECK(mp_tok_decode(t, mixed, 8, &text, &len) == MP_OK && len == 4 && memcmp(text, "Hi\0!", 4) == 0,
          "mixed ids decode to \"Hi\\0!\" (len %zu)", len);
    free(text);

    /* streaming pieces: one byte, nothing for BOS, -1 out of range */
    char buf[8];
    CHECK(mp_tok_token_bytes(t, -1, 65, buf, sizeof buf) == 1 && strcmp(buf, "A") == 0, "piece of 65");
    CHECK(mp_tok_token_bytes(t, 65, 256, buf, sizeof buf) == 0 && buf[0] == '\0', "piece of BOS");
    CHECK(mp_tok_token_bytes(t, -1, 257, buf, sizeof buf) == -1 && mp_tok_token_bytes(t, -1, -1, buf, 8) == -1,
          "out of range");
    CHECK(mp_tok_token_bytes(t, -1, 200, buf, sizeof buf) == 1 && (unsigned char)buf[0] == 200, "byte 200");

    /* spellings: GPT-2's map (space is U+0120 "Ġ"), BOS "<s>" */
    CHECK(strcmp(mp_tok_piece(t, 32), "\xc4\xa0") == 0 && strcmp(mp_tok_piece(t, 65), "A") == 0 &&
              strcmp(mp_tok_piece(t, 256), "<s>") == 0 && mp_tok_piece(t, 257) == NULL, "pieces");
    CHECK(mp_tok_find(t, "\xc4\xa0") == 32 && mp_tok_find(t, "<s>") == 256 && mp_tok_find(t, "ab") == -1, "find");
    for (int b = 0; b < 256; b++) {
        const char *p = mp_tok_piece(t, b);
        if (mp_tok_find(t, p) != b) { CHECK(0, "find(piece(%d)) == %d", b, mp_tok_find(t, p)); break; }
    }

    /* the GGUF export of a "bytes" model carries a byte vocabulary; read back
     * through the byte-level BPE path, it encodes to the same ids */
    mp_config c = mp_config_default();
    c.d_model = 8; c.n_layer = 1; c.n_head = 2; c.n_kv_head = 2; c.d_head = 4; c.d_mlp = 16;
    c.vocab = 260; c.ctx = 8;
    mp_model *m = NULL;
    const char *path = "test_tok_bytes.gguf";
    CHECK(mp_model_new_random(&m, &c, 1, 0.1f) == MP_OK, "%s", mp_last_error());
    if (m) {
        snprintf(m->tokenizer, sizeof m->tokenizer, "bytes");
        CHECK(mp_model_save_gguf(m, NULL, path, MP_GGML_F32) == MP_OK, "%s", mp_last_error());
        mp_tok *g = NULL;
        CHECK(mp_tok_load_gguf(&g, path) == MP_OK, "%s", mp_last_error());
        const char *s = "Hello, w\xc3\xb6rld!\n  tabs\tand \x01\xff bytes 123";
        int *a = NULL, *b = NULL, na = 0, nb = 0;
        if (g) {
            CHECK(mp_tok_encode(t, s, strlen(s), MP_TOK_BOS, &a, &na) == MP_OK &&
                      mp_tok_encode(g, s, strlen(s), MP_TOK_BOS, &b, &nb) == MP_OK, "%s", mp_last_error());
            CHECK(na == nb && na == (int)strlen(s) + 1 && memcmp(a, b, (size_t)na * sizeof *a) == 0,
                  "bytes kind and the exported byte vocabulary agree (%d vs %d ids)", na, nb);
        }
        free(a);
        free(b);
        mp_tok_free(g);
        unlink(path);
    }
    mp_model_free(m);
    mp_tok_free(t);
    return tu_finish("test_tok_bytes");
}

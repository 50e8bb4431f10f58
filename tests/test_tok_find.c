/* test_tok_find.c — which tokenizer goes with a model (formats/tok_find.c):
 * mp_tok_find_beside's search order next to a model file, and
 * mp_tok_load_any's detection by content (llama2.c tokenizer.bin, a Hugging
 * Face tokenizer.json, a GGUF file's tokenizer), each checked against the
 * format's own loader on the same file; errors name the source. */
#include "formats.h"
#include "model.h"
#include "tok.h"
#include "quant.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void touch(const char *p) {
    FILE *f = fopen(p, "wb");
    if (f) fclose(f);
}

/* Encodes text with both tokenizers and compares the ids. */
static int same_ids(mp_tok *a, mp_tok *b, const char *text) {
    int *x = NULL, *y = NULL, nx = 0, ny = 0;
    int ok = mp_tok_encode(a, text, strlen(text), MP_TOK_BOS, &x, &nx) == MP_OK &&
             mp_tok_encode(b, text, strlen(text), MP_TOK_BOS, &y, &ny) == MP_OK && nx == ny && nx > 1 &&
             memcmp(x, y, (size_t)nx * sizeof *x) == 0;
    free(x);
    free(y);
    return ok;
}

int main(void) {
    mp_init();
    char dir[] = "/tmp/mp_tok_find_XXXXXX", p[1024], found[1024];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(p, sizeof p, "%s/net.bin", dir);
    touch(p);
    CHECK(mp_tok_find_beside(p, found, sizeof found) == 0 && found[0] == '\0', "nothing beside: 0 and an empty path");
    char stem_tok[1024], plain_tok[1024];
    snprintf(stem_tok, sizeof stem_tok, "%s/net.tok4096.bin", dir);
    touch(stem_tok);
    CHECK(mp_tok_find_beside(p, found, sizeof found) == 1 && strcmp(found, stem_tok) == 0, "stem match: %s", found);
    snprintf(plain_tok, sizeof plain_tok, "%s/tokenizer.bin", dir);
    touch(plain_tok);
    CHECK(mp_tok_find_beside(p, found, sizeof found) == 1 && strcmp(found, plain_tok) == 0,
          "tokenizer.bin comes first: %s", found);
    CHECK(mp_tok_find_beside(p, found, 8) == 0, "a path that does not fit is not found");
    unlink(plain_tok);
    unlink(stem_tok);
    unlink(p);
    rmdir(dir);

    mp_tok *a = NULL, *b = NULL;
    /* a Hugging Face tokenizer.json, detected by its name */
    const char *json = MP_TESTDATA "/bpe_llama3_tokenizer.json";
    CHECK(mp_tok_load_any(&a, json, 0) == MP_OK && mp_tok_get_kind(a) == MP_TOK_KIND_BPE, "%s", mp_last_error());
    CHECK(mp_tok_load_hf(&b, json) == MP_OK, "%s", mp_last_error());
    CHECK(a && b && same_ids(a, b, "Hello world, 123!"), "tokenizer.json: same ids as mp_tok_load_hf");
    mp_tok_free(a);
    mp_tok_free(b);
    a = b = NULL;
    /* a GGUF file's tokenizer, detected by content (a tiny model exported with
     * the byte vocabulary of a "bytes" model, under a name without .gguf) */
    mp_config c = mp_config_default();
    c.d_model = 8; c.n_layer = 1; c.n_head = 2; c.n_kv_head = 2; c.d_head = 4; c.d_mlp = 16;
    c.vocab = 260; c.ctx = 8;
    mp_model *m = NULL;
    const char *gguf = "test_tok_find.model";
    CHECK(mp_model_new_random(&m, &c, 1, 0.1f) == MP_OK, "%s", mp_last_error());
    if (m) {
        snprintf(m->tokenizer, sizeof m->tokenizer, "bytes");
        CHECK(mp_model_save_gguf(m, NULL, gguf, MP_GGML_F32) == MP_OK, "%s", mp_last_error());
        CHECK(mp_tok_load_any(&a, gguf, 0) == MP_OK, "%s", mp_last_error());
        CHECK(mp_tok_load_gguf(&b, gguf) == MP_OK, "%s", mp_last_error());
        CHECK(a && b && mp_tok_vocab(a) == mp_tok_vocab(b) && same_ids(a, b, "Hello world"), "GGUF: same ids");
        mp_tok_free(a);
        mp_tok_free(b);
        a = b = NULL;
        mp_model_free(m);
        unlink(gguf);
    }
    /* a llama2.c tokenizer.bin (the shared models' one) */
    /* (not tu_shared, which skips the whole test when ../shared is absent) */
    char bin[4096];
    const char *root = getenv("MP_SHARED_DIR") ? getenv("MP_SHARED_DIR") : MP_SHARED_DIR;
    snprintf(bin, sizeof bin, "%s/models/aidreams260K.tok512.bin", root);
    if (access(bin, R_OK) == 0) {
        CHECK(mp_tok_load_any(&a, bin, 512) == MP_OK && mp_tok_get_kind(a) != MP_TOK_KIND_BPE, "%s", mp_last_error());
        CHECK(mp_tok_load_llama2c(&b, bin, 512) == MP_OK, "%s", mp_last_error());
        CHECK(a && b && same_ids(a, b, "Once upon a time"), "tokenizer.bin: same ids as mp_tok_load_llama2c");
        mp_tok_free(a);
        mp_tok_free(b);
        a = b = NULL;
    } else {
        printf("note: ../shared/models absent: the tokenizer.bin case is skipped\n");
    }
    /* errors name the source */
    CHECK(mp_tok_load_any(&a, "/nonexistent/tok.json", 0) != MP_OK && strstr(mp_last_error(), "/nonexistent/tok.json"),
          "missing file named: %s", mp_last_error());
    CHECK(mp_tok_load_any(&a, MP_TESTDATA "/ref_tied.bin", 512) != MP_OK &&
              strstr(mp_last_error(), "ref_tied.bin"),
          "a model file is not a tokenizer, named: %s", mp_last_error());
    return tu_finish("test_tok_find");
}

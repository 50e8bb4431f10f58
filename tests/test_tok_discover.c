/* test_tok_discover.c — the tokenizer mp.load attaches when none is named
 * (formats/tok_find.c mp_tok_discover): a GGUF's own tokenizer is loaded; a
 * GGUF without one simply has none (no warning); an own source that fails is
 * a warning with the reason, not an error, and then the "bytes" hint still
 * applies; without an own source, a llama2.c tokenizer.bin next to the model
 * is loaded unless the model carries a hint, and a broken one is an error
 * naming it; mp_tok_load_for refuses a tokenizer with more tokens than the
 * model; the pad id (EOS, else BOS); and the padding of ragged
 * token rows (runtime/ragged.c mp_pad_batch) against hand-written batches. */
#include "formats.h"
#include "model.h"
#include "tok.h"
#include "tok_llama2c.h"
#include "quant.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void) {
    mp_init();
    char dir[] = "/tmp/mp_tok_discover_XXXXXX", model[1024], gguf[1024], tokbin[1024];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    mp_config c = mp_config_default();
    c.d_model = 8; c.n_layer = 1; c.n_head = 2; c.n_kv_head = 2; c.d_head = 4; c.d_mlp = 16;
    c.vocab = mp_tokenizer_bytelevel_vocab(); c.ctx = 8; /* a llama2.c tokenizer.bin has the model's vocabulary */
    mp_model *m = NULL;
    CHECK(mp_model_new_random(&m, &c, 1, 0.1f) == MP_OK, "%s", mp_last_error());
    if (!m) return tu_finish("test_tok_discover");
    mp_tok_found f;

    /* 1. a GGUF with its own tokenizer (the bytes vocabulary) */
    snprintf(gguf, sizeof gguf, "%s/with.gguf", dir);
    snprintf(m->tokenizer, sizeof m->tokenizer, "bytes");
    CHECK(mp_model_save_gguf(m, NULL, gguf, MP_GGML_F32) == MP_OK, "%s", mp_last_error());
    CHECK(mp_tok_discover(gguf, gguf, "", c.vocab, &f) == MP_OK && f.origin == MP_TOK_FROM_OWN && f.tok &&
              strcmp(f.source, gguf) == 0 && !f.own_failed, "own GGUF tokenizer: origin %d", (int)f.origin);
    mp_tok_free(f.tok);
    /* ... and one without: none, and no warning */
    snprintf(gguf, sizeof gguf, "%s/without.gguf", dir);
    m->tokenizer[0] = '\0';
    CHECK(mp_model_save_gguf(m, NULL, gguf, MP_GGML_F32) == MP_OK, "%s", mp_last_error());
    CHECK(mp_tok_discover(gguf, gguf, "", c.vocab, &f) == MP_OK && f.origin == MP_TOK_FROM_NONE && !f.tok &&
              !f.own_failed, "GGUF without a tokenizer: origin %d, own_failed %d", (int)f.origin, f.own_failed);
    /* 2. an own source that is there but broken: a warning naming it; the bytes hint still applies */
    char broken[1024];
    snprintf(broken, sizeof broken, "%s/tokenizer.json", dir);
    FILE *fp = fopen(broken, "w");
    if (fp) fputs("{not json", fp), fclose(fp);
    CHECK(mp_tok_discover(gguf, broken, "bytes", c.vocab, &f) == MP_OK && !f.tok && f.own_failed &&
              strstr(f.why, broken) && f.origin == MP_TOK_FROM_BYTES,
          "broken own source: own_failed %d, why '%s', origin %d", f.own_failed, f.why, (int)f.origin);
    /* 3. no own source: a tokenizer.bin beside the model, searched only without a hint */
    snprintf(model, sizeof model, "%s/net.bin", dir);
    CHECK(mp_tok_discover(model, "", "", c.vocab, &f) == MP_OK && f.origin == MP_TOK_FROM_NONE && !f.tok,
          "nothing beside: none");
    snprintf(tokbin, sizeof tokbin, "%s/net.tok.bin", dir);
    CHECK(mp_tokenizer_save_bytelevel(tokbin) == MP_OK, "%s", mp_last_error());
    CHECK(mp_tok_discover(model, NULL, "", c.vocab, &f) == MP_OK && f.origin == MP_TOK_FROM_BESIDE && f.tok &&
              strcmp(f.source, tokbin) == 0 && mp_tok_vocab(f.tok) == mp_tokenizer_bytelevel_vocab(),
          "beside: origin %d, source %s", (int)f.origin, f.source);
    CHECK(f.tok && mp_tok_pad_id(f.tok) == 2 && mp_tok_eos(f.tok) == 2, "a llama2.c tokenizer pads with EOS (2)");
    mp_tok_free(f.tok);
    mp_tok *bytes = NULL;
    CHECK(mp_tok_new_bytes(&bytes) == MP_OK && mp_tok_eos(bytes) < 0 && mp_tok_pad_id(bytes) == MP_TOK_BYTES_BOS,
          "bytes (no EOS) pad with BOS 256");
    mp_tok_free(bytes);
    CHECK(mp_tok_discover(model, NULL, "bytes", c.vocab, &f) == MP_OK && f.origin == MP_TOK_FROM_BYTES && !f.tok,
          "a bytes hint is not second-guessed by a file beside: origin %d", (int)f.origin);
    mp_tok *t = NULL;
    const char *json = MP_TESTDATA "/bpe_llama3_tokenizer.json";
    CHECK(mp_tok_load_for(&t, json, 300) == MP_ERR_ARG && !t && strstr(mp_last_error(), json) &&
              strstr(mp_last_error(), "more than the model's vocabulary (300)"), "too many tokens: %s", mp_last_error());
    CHECK(mp_tok_load_for(&t, json, 1 << 20) == MP_OK && t, "enough: %s", mp_last_error());
    mp_tok_free(t);
    /* a broken file beside is an error naming it */
    fp = fopen(tokbin, "wb");
    if (fp) fputs("xx", fp), fclose(fp);
    CHECK(mp_tok_discover(model, NULL, "", c.vocab, &f) != MP_OK && !f.tok && strstr(mp_last_error(), tokbin),
          "broken file beside: %s", mp_last_error());
    unlink(tokbin);
    unlink(broken);
    unlink(gguf);
    snprintf(gguf, sizeof gguf, "%s/with.gguf", dir);
    unlink(gguf);
    rmdir(dir);
    mp_model_free(m);

    /* padding of ragged rows: lengths 3, 1, 2 */
    {
        const int ids[] = {5, 6, 7, /**/ 8, /**/ 9, 10}, n[] = {3, 1, 2};
        const int T = mp_pad_width(n, 3);
        CHECK(T == 3, "width %d", T);
        int tok[9], mask[9];
        const int right_tok[9] = {5, 6, 7, 8, 0, 0, 9, 10, 0}, right_mask[9] = {1, 1, 1, 1, 0, 0, 1, 1, 0};
        const int left_tok[9] = {5, 6, 7, 0, 0, 8, 0, 9, 10}, left_mask[9] = {1, 1, 1, 0, 0, 1, 0, 1, 1};
        mp_pad_batch(ids, n, 3, T, 0, 0, tok, mask);
        CHECK(memcmp(tok, right_tok, sizeof tok) == 0 && memcmp(mask, right_mask, sizeof mask) == 0, "right padding");
        mp_pad_batch(ids, n, 3, T, 0, 1, tok, mask);
        CHECK(memcmp(tok, left_tok, sizeof tok) == 0 && memcmp(mask, left_mask, sizeof mask) == 0, "left padding");
        int pos[9];
        const int left_pos[9] = {0, 1, 2, 0, 0, 0, 0, 0, 1};
        mp_mask_positions(mask, 3, T, pos);
        CHECK(memcmp(pos, left_pos, sizeof pos) == 0, "left-padded rows start at position 0");
    }
    return tu_finish("test_tok_discover");
}

/* tok_hf.c — mp_tok_load_hf: a Hugging Face tokenizer.json (byte-level BPE
 * model) read with json.h into the arrays of mp_tok_params: vocabulary and
 * added tokens by id, merges in either form, the pre_tokenizer tree turned into
 * a regex sequence, BOS/EOS from a TemplateProcessing post-processor. */
#include "tok.h"
#include "json.h"
#include "pretok.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define HF_MAX_REGEX 16

typedef struct {
    const char *path;
    const char *re[HF_MAX_REGEX];
    char *owned[HF_MAX_REGEX];   /* regexes made here (escaped Split strings) */
    int n_re, byte_level, add_prefix_space;
} hf_pre;

static mp_status hf_add_re(hf_pre *h, const char *re, char *owned) {
    if (h->n_re == HF_MAX_REGEX) {
        free(owned);
        return mp_error(MP_ERR_FORMAT, "%s: pre_tokenizer has more than %d regex steps", h->path, HF_MAX_REGEX);
    }
    h->owned[h->n_re] = owned;
    h->re[h->n_re++] = re;
    return MP_OK;
}

static int json_flag(const mp_json *obj, const char *key, int dflt) {
    const mp_json *v = mp_json_get(obj, key);
    return mp_json_type_of(v) == MP_JSON_BOOL ? mp_json_bool(v) : dflt;
}

static mp_status hf_pre_node(hf_pre *h, const mp_json *n, int depth) {
    const char *type = mp_json_string(mp_json_get(n, "type"), NULL);
    if (depth > 8) return mp_error(MP_ERR_FORMAT, "%s: pre_tokenizer nested too deeply", h->path);
    if (!type) return mp_error(MP_ERR_FORMAT, "%s: pre_tokenizer without a type", h->path);
    if (strcmp(type, "Sequence") == 0) {
        const mp_json *seq = mp_json_get(n, "pretokenizers");
        if (mp_json_type_of(seq) != MP_JSON_ARRAY)
            return mp_error(MP_ERR_FORMAT, "%s: pre_tokenizer Sequence without a pretokenizers array", h->path);
        for (size_t i = 0; i < mp_json_len(seq); i++) {
            mp_status st = hf_pre_node(h, mp_json_at(seq, i), depth + 1);
            if (st != MP_OK) return st;
        }
        return MP_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        h->byte_level = 1;
        if (json_flag(n, "add_prefix_space", 0)) {
            if (h->n_re > 0)   /* Hugging Face then prefixes every piece of the earlier steps */
                return mp_error(MP_ERR_FORMAT, "%s: pre_tokenizer ByteLevel with add_prefix_space after other "
                                "steps is not supported", h->path);
            h->add_prefix_space = 1;
        }
        if (json_flag(n, "use_regex", 1)) {
            const char *const *pat;
            int np = mp_pretok_preset_patterns("gpt2", &pat);
            return hf_add_re(h, pat[np - 1], NULL);
        }
        return MP_OK;
    }
    if (strcmp(type, "Digits") == 0)
        return hf_add_re(h, json_flag(n, "individual_digits", 0) ? "\\p{N}" : "\\p{N}+", NULL);
    if (strcmp(type, "Split") == 0) {
        const mp_json *pat = mp_json_get(n, "pattern");
        const char *behavior = mp_json_string(mp_json_get(n, "behavior"), NULL);
        const char *re = mp_json_string(mp_json_get(pat, "Regex"), NULL);
        size_t sl = 0;
        const char *lit = mp_json_string(mp_json_get(pat, "String"), &sl);
        if (!behavior || strcmp(behavior, "Isolated") != 0 || json_flag(n, "invert", 0))
            return mp_error(MP_ERR_FORMAT, "%s: pre_tokenizer Split with behavior '%s'%s is not supported "
                            "(Isolated only)", h->path, behavior ? behavior : "?",
                            json_flag(n, "invert", 0) ? " and invert" : "");
        if (re) return hf_add_re(h, re, NULL);
        if (!lit || !sl || strlen(lit) != sl)
            return mp_error(MP_ERR_FORMAT, "%s: pre_tokenizer Split without a Regex or String pattern", h->path);
        char *q = malloc(sl * 2 + 1), *w = q;   /* the literal, regex-escaped */
        if (!q) return mp_error(MP_ERR_NOMEM, "%s: out of memory", h->path);
        for (const char *c = lit; *c; c++) {
            if (strchr("\\^$.|?*+()[]{}-/#", *c) || *c == ' ') *w++ = '\\';
            *w++ = *c;
        }
        *w = '\0';
        return hf_add_re(h, q, q);
    }
    return mp_error(MP_ERR_FORMAT, "%s: pre_tokenizer type '%s' is not supported (ByteLevel, Split, Digits, "
                    "Sequence)", h->path, type);
}

/* The id of a TemplateProcessing SpecialToken item, or -1. */
static int hf_template_id(const mp_json *tp, const mp_json *item) {
    const char *name = mp_json_string(mp_json_get(mp_json_get(item, "SpecialToken"), "id"), NULL);
    int64_t id;
    if (!name) return -1;
    const mp_json *ids = mp_json_get(mp_json_get(mp_json_get(tp, "special_tokens"), name), "ids");
    if (mp_json_len(ids) != 1 || mp_json_int64(mp_json_at(ids, 0), &id) != 0 || id < 0 || id >= (1 << 24))
        return -1;
    return (int)id;
}

mp_status mp_tok_load_hf(mp_tok **out, const char *path) {
    mp_status st = MP_OK;
    mp_json_doc *doc = NULL;
    const char **tokens = NULL, **merges = NULL;
    int32_t *types = NULL;
    char *mblob = NULL;
    hf_pre pre;
    memset(&pre, 0, sizeof pre);
    pre.path = path;
    *out = NULL;
    if ((st = mp_json_parse_file(path, &doc)) != MP_OK) return st;
    const mp_json *root = mp_json_root(doc), *model = mp_json_get(root, "model");
    const char *mtype = mp_json_string(mp_json_get(model, "type"), NULL);
    if (!mtype || strcmp(mtype, "BPE") != 0) {
        st = mp_error(MP_ERR_FORMAT, "%s: model.type '%s' is not supported (BPE only)", path, mtype ? mtype : "?");
        goto cleanup;
    }
    if (json_flag(model, "byte_fallback", 0)) {
        st = mp_error(MP_ERR_FORMAT, "%s: BPE with byte_fallback (SentencePiece-style) is not supported; "
                      "use the model's GGUF or tokenizer.model", path);
        goto cleanup;
    }
    const mp_json *vocab = mp_json_get(model, "vocab"), *added = mp_json_get(root, "added_tokens");
    const mp_json *jm = mp_json_get(model, "merges");
    if (mp_json_type_of(vocab) != MP_JSON_OBJECT || mp_json_type_of(jm) != MP_JSON_ARRAY) {
        st = mp_error(MP_ERR_FORMAT, "%s: model.vocab must be an object and model.merges an array", path);
        goto cleanup;
    }
    /* the vocabulary size: the largest id + 1 over vocab and added_tokens */
    int64_t n_tok = 0, id;
    size_t na = mp_json_len(added);
    mp_json_member vm;
    for (mp_json_first(vocab, &vm); vm.value; mp_json_next(&vm)) {
        if (mp_json_int64(vm.value, &id) != 0 || id < 0 || id >= (1 << 24)) {
            st = mp_error(MP_ERR_FORMAT, "%s: model.vocab entry %zu has no valid id (0..%d)", path, vm.index,
                          (1 << 24) - 1);
            goto cleanup;
        }
        if (id + 1 > n_tok) n_tok = id + 1;
    }
    for (size_t i = 0; i < na; i++) {
        if (mp_json_int64(mp_json_get(mp_json_at(added, i), "id"), &id) != 0 || id < 0 || id >= (1 << 24)) {
            st = mp_error(MP_ERR_FORMAT, "%s: added_tokens entry %zu has no valid id (0..%d)", path, i,
                          (1 << 24) - 1);
            goto cleanup;
        }
        if (id + 1 > n_tok) n_tok = id + 1;
    }
    if (!(tokens = mp_calloc((size_t)n_tok + 1, sizeof *tokens, "tokenizer.json vocabulary")) ||
        !(types = mp_calloc((size_t)n_tok + 1, sizeof *types, "tokenizer.json vocabulary"))) {
        st = MP_ERR_NOMEM;
        goto cleanup;
    }
    for (mp_json_first(vocab, &vm); vm.value; mp_json_next(&vm)) {
        size_t kl = vm.key_len;
        const char *k = vm.key;
        mp_json_int64(vm.value, &id);
        if (strlen(k) != kl || tokens[id]) {
            st = mp_error(MP_ERR_FORMAT, "%s: model.vocab entry %zu ('%.60s'): %s", path, vm.index, k,
                          tokens[id] ? "its id is used twice" : "holds a NUL character");
            goto cleanup;
        }
        tokens[id] = k;
        types[id] = MP_TOK_TYPE_NORMAL;
    }
    for (size_t i = 0; i < na; i++) {
        const mp_json *a = mp_json_at(added, i);
        size_t cl = 0;
        const char *c = mp_json_string(mp_json_get(a, "content"), &cl);
        mp_json_int64(mp_json_get(a, "id"), &id);
        if (!c || !cl || strlen(c) != cl || (tokens[id] && strcmp(tokens[id], c) != 0)) {
            st = mp_error(MP_ERR_FORMAT, "%s: added_tokens entry %zu (id %lld): %s", path, i, (long long)id,
                          !c || !cl ? "no content" : strlen(c) != cl ? "content holds a NUL character"
                                                                     : "content differs from model.vocab");
            goto cleanup;
        }
        tokens[id] = c;
        types[id] = json_flag(a, "special", 0) ? MP_TOK_TYPE_CONTROL : MP_TOK_TYPE_USER_DEFINED;
    }
    for (int64_t i = 0; i < n_tok; i++)
        if (!tokens[i]) { tokens[i] = ""; types[i] = MP_TOK_TYPE_UNUSED; }   /* ids nobody names */

    /* merges: "a b" strings, or [a, b] pairs (joined with a space) */
    size_t nm = mp_json_len(jm), mtext = 0;
    if (nm > (size_t)INT_MAX) { st = mp_error(MP_ERR_FORMAT, "%s: too many merges", path); goto cleanup; }
    for (size_t i = 0; i < nm; i++) {
        const mp_json *m = mp_json_at(jm, i);
        size_t l = 0, l2 = 0;
        if (mp_json_type_of(m) == MP_JSON_STRING) mp_json_string(m, &l);
        else if (mp_json_type_of(m) == MP_JSON_ARRAY && mp_json_len(m) == 2 &&
                 mp_json_string(mp_json_at(m, 0), &l) && mp_json_string(mp_json_at(m, 1), &l2)) l += l2 + 1;
        else {
            st = mp_error(MP_ERR_FORMAT, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
            goto cleanup;
        }
        mtext += l + 1;
    }
    if (!(merges = mp_calloc(nm + 1, sizeof *merges, "tokenizer.json merges")) ||
        !(mblob = mp_malloc(mtext + 1, "tokenizer.json merges"))) {
        st = MP_ERR_NOMEM;
        goto cleanup;
    }
    char *w = mblob;
    for (size_t i = 0; i < nm; i++) {
        const mp_json *m = mp_json_at(jm, i);
        merges[i] = w;
        if (mp_json_type_of(m) == MP_JSON_STRING) {
            size_t l;
            const char *s = mp_json_string(m, &l);
            memcpy(w, s, l);
            w += l;
        } else {
            size_t l1, l2;
            const char *a = mp_json_string(mp_json_at(m, 0), &l1), *b = mp_json_string(mp_json_at(m, 1), &l2);
            memcpy(w, a, l1);
            w[l1] = ' ';
            memcpy(w + l1 + 1, b, l2);
            w += l1 + 1 + l2;
        }
        *w++ = '\0';
    }

    const mp_json *pt = mp_json_get(root, "pre_tokenizer");
    if (mp_json_type_of(pt) == MP_JSON_OBJECT && (st = hf_pre_node(&pre, pt, 0)) != MP_OK) goto cleanup;
    if (!pre.byte_level) {
        st = mp_error(MP_ERR_FORMAT, "%s: no ByteLevel pre_tokenizer: not a byte-level BPE tokenizer", path);
        goto cleanup;
    }

    mp_tok_params p = mp_tok_params_default();
    p.source = path;
    p.model = "gpt2";
    p.pre_regex = pre.re;
    p.n_pre_regex = pre.n_re;
    p.n_tokens = (int)n_tok;
    p.tokens = tokens;
    p.token_type = types;
    p.n_merges = (int)nm;
    p.merges = merges;
    p.ignore_merges = json_flag(model, "ignore_merges", 0);
    p.add_prefix_space = pre.add_prefix_space;
    p.add_bos = p.add_eos = 0;
    /* BOS / EOS from a TemplateProcessing post-processor (alone or in a Sequence) */
    const mp_json *pp = mp_json_get(root, "post_processor"), *tp = NULL;
    const char *ptype = mp_json_string(mp_json_get(pp, "type"), NULL);
    if (ptype && strcmp(ptype, "TemplateProcessing") == 0) tp = pp;
    else if (ptype && strcmp(ptype, "Sequence") == 0)
        for (size_t i = 0; i < mp_json_len(mp_json_get(pp, "processors")); i++) {
            const mp_json *q = mp_json_at(mp_json_get(pp, "processors"), i);
            const char *qt = mp_json_string(mp_json_get(q, "type"), NULL);
            if (qt && strcmp(qt, "TemplateProcessing") == 0) tp = q;
        }
    if (tp) {
        const mp_json *single = mp_json_get(tp, "single");
        size_t ns = mp_json_len(single);
        int b = ns ? hf_template_id(tp, mp_json_at(single, 0)) : -1;
        int e = ns > 1 ? hf_template_id(tp, mp_json_at(single, ns - 1)) : -1;
        if (b >= 0 && b < n_tok) { p.bos = b; p.add_bos = 1; }
        if (e >= 0 && e < n_tok) { p.eos = e; p.add_eos = 1; }
    }
    st = mp_tok_new(out, &p);
cleanup:
    for (int i = 0; i < pre.n_re; i++) free(pre.owned[i]);
    free(tokens);
    free(types);
    free(merges);
    free(mblob);
    mp_json_free(doc);
    return st;
}

/* tok.h — mp_tok, one tokenizer interface over every vocabulary mechprobe reads:
 *   - llama2.c tokenizer.bin (wraps mp_tokenizer, tok_llama2c.h);
 *   - SentencePiece-style vocabularies given as arrays (GGUF tokenizer.ggml.model
 *     "llama": pieces with U+2581 for spaces, scores, token types): the same
 *     llama2.c algorithm (score-ordered merges, byte fallback, dummy prefix);
 *   - byte-level BPE (GGUF "gpt2", Hugging Face tokenizer.json model BPE with a
 *     ByteLevel pre-tokenizer): GPT-2's byte-to-unicode map, ranked merges
 *     (lowest rank first, leftmost on ties) applied within each pre-token of
 *     the named pre-tokenizer (pretok.h: gpt2, llama3, qwen2, smollm, default)
 *     or of custom regexes, with a per-call cache of pre-tokens.
 * Built from in-memory arrays, so the GGUF loader and a tokenizer.json reader
 * only gather the arrays. Byte-level BPE is lossless: decode(encode(x)) == x for
 * any bytes, invalid UTF-8 and NUL included. */
#ifndef MP_TOK_H
#define MP_TOK_H

#include "mp_common.h"
#include "tok_llama2c.h"

typedef struct mp_tok mp_tok;

typedef enum {
    MP_TOK_KIND_LLAMA2C = 0,   /* tokenizer.bin */
    MP_TOK_KIND_SPM,           /* SentencePiece-style from arrays */
    MP_TOK_KIND_BPE,           /* byte-level BPE */
    MP_TOK_KIND_BYTES          /* raw bytes: ids 0..255 the bytes, 256 BOS (mp_tok_new_bytes) */
} mp_tok_kind;

/* GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum {
    MP_TOK_TYPE_UNDEFINED = 0, MP_TOK_TYPE_NORMAL = 1, MP_TOK_TYPE_UNKNOWN = 2,
    MP_TOK_TYPE_CONTROL = 3, MP_TOK_TYPE_USER_DEFINED = 4, MP_TOK_TYPE_UNUSED = 5,
    MP_TOK_TYPE_BYTE = 6
};

/* Encode flags. */
enum {
    MP_TOK_BOS = 1,       /* prepend the BOS token (error if the vocabulary has none) */
    MP_TOK_EOS = 2,       /* append the EOS token (likewise) */
    MP_TOK_SPECIAL = 4,   /* byte-level BPE: text equal to a CONTROL token (token_type)
                             becomes that token (llama.cpp's parse_special). USER_DEFINED
                             tokens are always split out, as in llama.cpp and Hugging
                             Face. Ignored by SentencePiece kinds. */
    MP_TOK_PREFIX = 8,    /* prepend_space = true: byte-level BPE prepends ' ' to each
                             stretch of text between added tokens that does not start
                             with one (as add_prefix_space); SentencePiece kinds add
                             their dummy prefix (their default anyway); bytes: ignored */
    MP_TOK_NO_PREFIX = 16 /* prepend_space = false: no dummy prefix (SentencePiece
                             kinds) and no prefix space (BPE, even with
                             add_prefix_space); bytes: ignored. PREFIX wins over both. */
};

/* What the GGUF loader or a tokenizer.json reader passes. Arrays are read
 * during mp_tok_new only (copied). */
typedef struct {
    const char *source;          /* names the origin in error messages (file path) */
    const char *model;           /* "llama" (SentencePiece) or "gpt2" (byte-level BPE) */
    const char *pre;             /* BPE: tokenizer.ggml.pre; NULL or "" = "default" */
    const char *const *pre_regex;/* BPE: custom pre-tokenizer regexes (tokenizer.json
                                    Split / ByteLevel), used instead of `pre` when n_pre_regex > 0 */
    int n_pre_regex;
    int n_tokens;
    const char *const *tokens;   /* [n_tokens] NUL-terminated (BPE: GPT-2's unicode form, "Ġthe") */
    const float *scores;         /* [n_tokens] or NULL (SentencePiece merge order) */
    const int32_t *token_type;   /* [n_tokens] MP_TOK_TYPE_* or NULL (all NORMAL) */
    int n_merges;
    const char *const *merges;   /* BPE: [n_merges] "a b", rank = index */
    int bos, eos;                /* ids, -1 = none */
    int add_bos, add_eos;        /* what the model wants (mp_tok_add_bos/eos): 0/1,
                                    -1 = by model (llama: BOS yes; gpt2: llama3 family yes, else no) */
    int ignore_merges;           /* BPE: -1 = by pre-tokenizer (llama3 family: 1), 0/1 to force */
    int add_prefix_space;        /* BPE: prepend ' ' to each stretch of text between added
                                    tokens that does not start with one (tokenizer.json
                                    ByteLevel add_prefix_space); default 0 */
    int add_space_prefix;        /* llama: tokenizer.ggml.add_space_prefix; -1/1 = yes. 0 is
                                    not supported by the llama2.c algorithm (MP_ERR_FORMAT) */
} mp_tok_params;

mp_tok_params mp_tok_params_default(void);

/* Builds a tokenizer from arrays. Validates everything (untrusted input):
 * counts, NULL entries, ids in range; BPE: every merge must be "a b" with a, b
 * and ab in the vocabulary (MP_ERR_FORMAT naming the merge, its rank and the
 * source); llama: byte pieces <0x00>..<0xFF> must sit at ids 3..258 (the
 * llama2.c layout) when the vocabulary has byte pieces at all. */
mp_status mp_tok_new(mp_tok **out, const mp_tok_params *p);

/* The vocabulary of byte-level models (trained on raw bytes, e.g. on
 * mp.tasks.text; checkpoints say tokenizer "bytes"): ids 0..255 are the bytes,
 * 256 is BOS (added by default), no EOS; vocab 257, so a model using it needs
 * a vocabulary of at least 257. Encoding is lossless for any bytes, NUL
 * included. Decoding emits nothing for BOS and, unlike the other kinds, for
 * any id outside 0..255 (out-of-range ids are not an error: a byte-level
 * model's vocabulary may extend past 256 with ids no text maps to); pieces
 * (mp_tok_piece) are spelled with GPT-2's byte-to-unicode map, BOS "<s>". */
#define MP_TOK_BYTES_BOS 256
mp_status mp_tok_new_bytes(mp_tok **out);

/* Wraps a loaded llama2.c tokenizer (takes ownership; freed by mp_tok_free,
 * also on failure). BOS 1, EOS 2, add_bos 1. */
mp_status mp_tok_from_llama2c(mp_tok **out, mp_tokenizer *t);
/* mp_tokenizer_load + mp_tok_from_llama2c. */
mp_status mp_tok_load_llama2c(mp_tok **out, const char *path, int vocab);

/* A Hugging Face tokenizer.json with a byte-level BPE model (GPT-2, Llama 3,
 * Qwen2, SmolLM ...): model.vocab / merges (strings "a b" or pairs) /
 * ignore_merges, added_tokens (special -> CONTROL, else USER_DEFINED), the
 * pre_tokenizer (ByteLevel, Split with Regex or String and behaviour Isolated,
 * Digits, Sequence of these), BOS/EOS from a TemplateProcessing post-processor
 * (SpecialToken first / last). Anything else (SentencePiece-style BPE with
 * byte_fallback, WordPiece, Unigram, other Split behaviours) is MP_ERR_FORMAT
 * naming the file and the construct. EOS is often only in config.json: set it
 * with mp_tok_set_bos_eos. */
mp_status mp_tok_load_hf(mp_tok **out, const char *path);

/* Overrides the BOS / EOS ids (-1 = none); MP_ERR_ARG when out of range. */
mp_status mp_tok_set_bos_eos(mp_tok *t, int bos, int eos);

void mp_tok_free(mp_tok *t);

mp_tok_kind mp_tok_get_kind(const mp_tok *t);
int mp_tok_vocab(const mp_tok *t);
int mp_tok_bos(const mp_tok *t);       /* -1 when none */
int mp_tok_eos(const mp_tok *t);
/* The id that pads a ragged batch (mp_pad_batch): EOS, else BOS, else 0 (no
 * tokenizer kind mechprobe reads carries a pad id of its own). */
int mp_tok_pad_id(const mp_tok *t);
int mp_tok_add_bos(const mp_tok *t);   /* 1 if the model expects BOS prepended */
int mp_tok_add_eos(const mp_tok *t);
/* The pre-tokenizer preset in use ("gpt2", "llama3", ..., "custom"), or NULL
 * for SentencePiece kinds and bytes. */
const char *mp_tok_pre(const mp_tok *t);

/* Encodes text[0, len) (any bytes; SentencePiece kinds reject NUL bytes).
 * *ids is malloc'ed (caller frees; NULL when *n == 0), flags MP_TOK_*. */
mp_status mp_tok_encode(const mp_tok *t, const char *text, size_t len, int flags, int **ids, int *n);
/* The same for a NUL-terminated string. */
mp_status mp_tok_encode_str(const mp_tok *t, const char *text, int flags, int **ids, int *n);

/* Decodes ids into bytes: *out malloc'ed and NUL-terminated, *len (may be NULL)
 * its length without the NUL (byte-level output may hold NUL bytes). BOS, EOS
 * and CONTROL tokens emit nothing; an id out of range is MP_ERR_ARG naming it. */
mp_status mp_tok_decode(const mp_tok *t, const int *ids, int n, char **out, size_t *len);

/* The bytes token `id` contributes when it follows `prev` (-1 at the start),
 * as decode produces them (for streaming output): written to buf (at most
 * cap - 1 bytes, NUL-terminated when cap > 0). Returns the full byte count
 * (snprintf-style), or -1 when id is out of range. */
int mp_tok_token_bytes(const mp_tok *t, int prev, int id, char *buf, size_t cap);

/* The vocabulary string of id as the source spells it ("Ġthe", "▁the",
 * "<0x0A>"; tokenizer.bin: llama2.c's piece), or NULL when out of range. */
const char *mp_tok_piece(const mp_tok *t, int id);

/* The id whose vocabulary string is `piece` (lowest id among duplicates), or -1. */
int mp_tok_find(const mp_tok *t, const char *piece);

/* GPT-2's byte-to-unicode map: the code point byte b is written as, and the
 * inverse (-1 for a code point that stands for no byte). */
uint32_t mp_bpe_byte_to_cp(unsigned char b);
int mp_bpe_cp_to_byte(uint32_t cp);

#endif

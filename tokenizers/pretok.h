/* pretok.h — pre-tokenizers of byte-level BPE tokenizers: a sequence of Unicode
 * regexes (PCRE2 in UTF + UCP mode) that splits text into the pieces BPE merges
 * within. Each regex splits every piece produced so far into its matches and the
 * gaps between them, keeping both (Hugging Face's Split "Isolated" behaviour,
 * llama.cpp's unicode_regex_split), so the pieces always tile the text exactly.
 * Invalid UTF-8 never matches (PCRE2_MATCH_INVALID_UTF): such bytes end up in gap
 * pieces, and byte-level BPE still round-trips them.
 *
 * Named presets follow GGUF's tokenizer.ggml.pre values (llama.cpp's names):
 *   gpt2      gpt-2 gpt2 phi-2 mpt olmo jina-es jina-de jina-v2-* roberta-bpe ...
 *             's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   llama3    llama3 llama-v3 llama-bpe falcon3 pixtral dbrx smaug-bpe
 *             (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|
 *             \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *             (llama3 family: whole pre-tokens found in the vocabulary skip the merges)
 *   qwen2     qwen2 deepseek-r1-qwen stablelm2 megrez: llama3's regex with \p{N} (single digits)
 *   smollm    smollm starcoder refact command-r codeshell exaone minerva-7b: \p{N}, then gpt2's
 *   default   default (and an absent name): llama.cpp's default sequence
 *             [\p{P}\$\+<=>\^~\|]+ , gpt2's, \p{N}+ , [0-9][0-9][0-9]
 * The case-insensitive contractions (?i:'s|...) of the Hugging Face files are
 * spelt out as [sS]... as llama.cpp does: the same except for U+017F (long s). */
#ifndef MP_PRETOK_H
#define MP_PRETOK_H

#include "mp_common.h"

typedef struct mp_pretok mp_pretok;

/* A piece of the text: bytes [off, off + len). */
typedef struct { size_t off, len; } mp_pretok_span;

/* A named preset (above); NULL or "" mean "default". *ignore_merges (may be
 * NULL) receives the preset's rule: 1 for the llama3 family, else 0. An unknown
 * name is MP_ERR_FORMAT naming it and listing the known ones. */
mp_status mp_pretok_new_named(mp_pretok **out, const char *name, int *ignore_merges);

/* A custom sequence of n >= 1 PCRE2 patterns (e.g. the Split regex of a
 * tokenizer.json). A pattern that does not compile is MP_ERR_FORMAT with
 * PCRE2's message and the offset. n == 0 gives a pre-tokenizer that returns the
 * whole text as one piece. */
mp_status mp_pretok_new(mp_pretok **out, const char *const *patterns, int n);

void mp_pretok_free(mp_pretok *p);

/* Splits text[0, len) (any bytes, NUL included): *spans (malloc'ed, caller
 * frees) receives *n non-empty pieces in order, tiling the text. An empty text
 * gives no piece (*spans may be NULL). Safe to call from several threads. */
mp_status mp_pretok_split(const mp_pretok *p, const char *text, size_t len,
                          mp_pretok_span **spans, size_t *n);

/* The canonical preset name a tokenizer.ggml.pre value maps to, or NULL. */
const char *mp_pretok_preset(const char *name);
/* The regexes of a preset (static strings): their count, or -1 if unknown. */
int mp_pretok_preset_patterns(const char *name, const char *const **patterns);

#endif

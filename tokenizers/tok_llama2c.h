/* tok_llama2c.h — llama2.c tokenizer.bin (SentencePiece-style pieces with scores):
 * encode and decode exactly as llama2.c's run.c does (UTF-8 code points looked up
 * as pieces, byte fallback to <0xXX> ids 3..258, score-ordered pair merges, BOS,
 * the dummy-prefix space; decode strips the space after BOS and maps <0xXX>). */
#ifndef MP_TOK_LLAMA2C_H
#define MP_TOK_LLAMA2C_H

#include "mp_common.h"

typedef struct mp_tokenizer mp_tokenizer;

/* Reads a tokenizer.bin with `vocab` entries (the model's vocabulary size).
 * Every length is validated against the file; a file that is too short, has a
 * negative/absurd piece length or trailing garbage is MP_ERR_FORMAT naming it. */
mp_status mp_tokenizer_load(mp_tokenizer **out, const char *path, int vocab);
void mp_tokenizer_free(mp_tokenizer *t);
/* The same tokenizer from in-memory pieces (NUL-terminated, as llama2.c spells
 * them: ' ' for SentencePiece's U+2581, <0xXX> byte pieces at ids 3..258) and
 * scores (NULL: all 0), e.g. from GGUF metadata; copies both. */
mp_status mp_tokenizer_new(mp_tokenizer **out, int vocab, const char *const *pieces,
                                   const float *scores);

int mp_tokenizer_vocab(const mp_tokenizer *t);
int mp_tokenizer_bos(const mp_tokenizer *t);  /* 1 */
int mp_tokenizer_eos(const mp_tokenizer *t);  /* 2 */

/* Encodes UTF-8 text. *out is malloc'ed (caller frees), *n its length.
 * bos/eos: prepend BOS / append EOS. */
mp_status mp_tokenizer_encode(const mp_tokenizer *t, const char *text, int bos, int eos,
                              int **out, int *n);
/* The same with the dummy prefix (the " " piece llama2.c puts before non-empty
 * text, SentencePiece's add_dummy_prefix) on (prefix != 0, as
 * mp_tokenizer_encode) or off. */
mp_status mp_tokenizer_encode_prefix(const mp_tokenizer *t, const char *text, int bos, int eos, int prefix,
                                     int **out, int *n);

/* The piece for `token` following `prev` (llama2.c's decode): a pointer into the
 * tokenizer or to a static one-byte string for <0xXX>; NULL if out of range. */
const char *mp_tokenizer_piece(const mp_tokenizer *t, int prev, int token);

/* Decodes a whole sequence into a malloc'ed NUL-terminated string (BOS/EOS
 * emit nothing). */
mp_status mp_tokenizer_decode(const mp_tokenizer *t, const int *tokens, int n, char **out);

/* Writes a byte-level tokenizer.bin (for models made from scratch): <unk>, BOS,
 * EOS, <0x00>..<0xFF> at ids 3..258 and printable ASCII at 259..353. Atomic. */
mp_status mp_tokenizer_save_bytelevel(const char *path);
int mp_tokenizer_bytelevel_vocab(void); /* 354 */

#endif

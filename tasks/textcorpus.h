/* textcorpus.h — byte-level language-modelling windows from any text file.
 *
 * Vocabulary 257: bytes 0..255 and BOS = 256. The file's bytes are split into a
 * training part (the first bytes) and a validation part (the last
 * floor(size * val_fraction) bytes). A window of T positions starting at byte s
 * of a split is
 *     bos = 0: tokens[t] = x[s+t],                targets[t] = x[s+t+1]   (T+1 bytes)
 *     bos = 1: tokens[0] = BOS, tokens[t] = x[s+t-1] (t >= 1), targets[t] = x[s+t]  (T bytes)
 * so every position has a target (the next byte). Random windows start uniformly
 * among all starts that fit; each split has its own seeded MT19937 stream, so the
 * validation batches do not depend on how many training batches were drawn.
 * Errors name the file: missing/unreadable, empty, or a split shorter than one
 * window. A corpus object is not thread-safe (it owns its random streams). */
#ifndef MP_TEXTCORPUS_H
#define MP_TEXTCORPUS_H

#include <stddef.h>
#include <stdint.h>

#include "mp_common.h"

#define MP_TEXT_VOCAB 257
#define MP_TEXT_BOS 256
/* The largest corpus file accepted (it is read whole into memory). */
#define MP_TEXT_MAX_BYTES ((size_t)1 << 32)

typedef enum { MP_TEXT_TRAIN = 0, MP_TEXT_VAL = 1 } mp_text_split;

typedef struct {
    const char *path;     /* the text file (read whole at init; the string is not kept) */
    double val_fraction;  /* in [0, 1): share of the file, at its end, for validation */
    int bos;              /* 1: each window starts with BOS */
    uint64_t seed;
} mp_text_params;

typedef struct mp_text mp_text;

/* path NULL, val_fraction 0.1, bos 1, seed 1. */
mp_text_params mp_text_params_default(void);

mp_status mp_text_load(mp_text **out, const mp_text_params *p);
void mp_text_free(mp_text *t);  /* NULL-safe */
/* Restarts both splits' random streams from `seed`. */
void mp_text_seed(mp_text *t, uint64_t seed);

/* The whole file (n bytes), and the offset/length of a split within it. */
const uint8_t *mp_text_bytes(const mp_text *t, size_t *n);
size_t mp_text_split_offset(const mp_text *t, mp_text_split s);
size_t mp_text_split_len(const mp_text *t, mp_text_split s);
const char *mp_text_path(const mp_text *t);

/* The window at `start` (0-based within the split): tokens, targets int32 [T].
 * MP_ERR_ARG when it does not fit in the split. */
mp_status mp_text_window(const mp_text *t, mp_text_split s, size_t start, int T,
                         int32_t *tokens, int32_t *targets);

/* B random windows: tokens, targets int32 [B, T]; starts [B] (or NULL) receives
 * each window's first byte as an offset in the FILE (split offset + start). */
mp_status mp_text_sample(mp_text *t, mp_text_split s, int B, int T, int32_t *tokens,
                         int32_t *targets, int64_t *starts);

#endif

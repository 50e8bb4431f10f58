/* sae_data.h — SAE training data from mechprobe capture files (the run-file
 * schema: /acts/<hook> [B, T, D] per hook, /lengths [B] in dataset captures):
 * a row producer (mp_sae_produce_fn, runtime/sae_train.h) that streams the
 * real tokens' rows of one hook from one or more files in pieces of at most
 * `chunk_rows` rows, never the whole dataset in memory. Put it behind an
 * mp_sae_shuffler for training. */
#ifndef MP_SAE_DATA_H
#define MP_SAE_DATA_H

#include "sae_train.h"

typedef struct mp_sae_h5src mp_sae_h5src;

/* Opens every file (paths[0..n)) and checks that /acts/<hook> exists in each
 * with 3 dimensions and the same last extent; *d receives it. epochs: passes
 * over the files (0: forever). A missing file or dataset, a rank other than
 * 3 or a D that differs is an error naming the file. */
mp_status mp_sae_h5src_open(mp_sae_h5src **out, const char *const *paths, int n, const char *hook, int epochs,
                            int chunk_rows, int *d);
void mp_sae_h5src_close(mp_sae_h5src *src);
/* The rows in one pass over the files (real tokens only). */
long mp_sae_h5src_rows(const mp_sae_h5src *src);
/* An mp_sae_produce_fn (user = the source). */
mp_status mp_sae_h5src_produce(void *src, float *dst, int max_rows, int *got);

#endif

/* sae_data.c — streams one hook's activation rows out of capture files for
 * SAE training (sae_data.h): hyperslab reads of [1, t0:t1, D] pieces, the
 * padding of dataset captures (t >= /lengths[b]) skipped. */
#include "sae_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5io.h"

typedef struct {
    char *path;
    hid_t f, ds, space;
    int64_t B, T;
    int32_t *len;   /* [B] real tokens per row */
} h5file;

struct mp_sae_h5src {
    h5file *files;
    int n, d, epochs, epoch, chunk;
    int cur;            /* file */
    int64_t b, t;       /* next row within it */
    long rows;
};

static void file_close(h5file *f) {
    if (f->space >= 0) H5Sclose(f->space);
    if (f->ds >= 0) H5Dclose(f->ds);
    if (f->f >= 0) mp_h5_close(&f->f);
    free(f->len);
    free(f->path);
}

void mp_sae_h5src_close(mp_sae_h5src *src) {
    if (!src) return;
    for (int i = 0; i < src->n; i++) file_close(&src->files[i]);
    free(src->files);
    free(src);
}

mp_status mp_sae_h5src_open(mp_sae_h5src **out, const char *const *paths, int n, const char *hook, int epochs,
                            int chunk_rows, int *d) {
    *out = NULL;
    mp_io_init();
    if (n < 1) return mp_error(MP_ERR_ARG, "SAE dataset: no file given");
    if (!hook || !*hook) return mp_error(MP_ERR_ARG, "SAE dataset: no hook given");
    if (epochs < 0 || chunk_rows < 1) return mp_error(MP_ERR_ARG, "SAE dataset: epochs must be >= 0 and chunk_rows >= 1");
    mp_sae_h5src *src = mp_calloc(1, sizeof *src, "SAE dataset");
    if (!src) return MP_ERR_NOMEM;
    src->files = mp_calloc((size_t)n, sizeof(h5file), "SAE dataset files");
    if (!src->files) {
        free(src);
        return MP_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) src->files[i].f = src->files[i].ds = src->files[i].space = H5I_INVALID_HID;
    src->n = n;
    src->epochs = epochs;
    src->chunk = chunk_rows;
    char name[300];
    snprintf(name, sizeof name, "acts/%s", hook);
    mp_status st = MP_OK;
    int D = -1;
    for (int i = 0; i < n && !st; i++) {
        h5file *f = &src->files[i];
        if (!(f->path = strdup(paths[i]))) { st = mp_error(MP_ERR_NOMEM, "out of memory"); break; }
        if ((st = mp_h5_open(&f->f, paths[i], MP_H5_READ))) break;
        mp_h5_dsinfo info;
        if (!mp_h5_exists(f->f, name, NULL)) {
            st = mp_error(MP_ERR_FORMAT, "%s: no dataset /%s (the hook was not captured)", paths[i], name);
            break;
        }
        if ((st = mp_h5_dataset_info(f->f, name, &info))) break;
        if (info.ndim != 3 || !info.is_float) {
            st = mp_error(MP_ERR_FORMAT, "%s: /%s must be a float [B, T, D] dataset (has %d dimensions)", paths[i], name,
                          info.ndim);
            break;
        }
        if (D >= 0 && info.shape[2] != D) {
            st = mp_error(MP_ERR_FORMAT, "%s: /%s has D = %lld, the first file %d", paths[i], name,
                          (long long)info.shape[2], D);
            break;
        }
        if (info.shape[2] < 1 || info.shape[2] > (1 << 24)) {
            st = mp_error(MP_ERR_FORMAT, "%s: /%s has D = %lld", paths[i], name, (long long)info.shape[2]);
            break;
        }
        D = (int)info.shape[2];
        f->B = info.shape[0];
        f->T = info.shape[1];
        if ((f->ds = H5Dopen2(f->f, name, H5P_DEFAULT)) < 0 || (f->space = H5Dget_space(f->ds)) < 0) {
            st = mp_h5_error(MP_ERR_IO, "%s: cannot open /%s", paths[i], name);
            break;
        }
        f->len = mp_malloc((size_t)(f->B > 0 ? f->B : 1) * sizeof(int32_t), "SAE dataset lengths");
        if (!f->len) { st = MP_ERR_NOMEM; break; }
        if (mp_h5_exists(f->f, "lengths", NULL)) {
            mp_h5_dsinfo li;
            if ((st = mp_h5_dataset_info(f->f, "lengths", &li))) break;
            if (li.ndim != 1 || li.shape[0] != f->B) {
                st = mp_error(MP_ERR_FORMAT, "%s: /lengths must be [%lld]", paths[i], (long long)f->B);
                break;
            }
            if ((st = mp_h5_read_i32_into(f->f, "lengths", f->len, (size_t)f->B))) break;
            for (int64_t b = 0; b < f->B; b++)
                if (f->len[b] < 0 || f->len[b] > f->T) {
                    st = mp_error(MP_ERR_FORMAT, "%s: /lengths[%lld] = %d is outside 0..%lld", paths[i], (long long)b,
                                  f->len[b], (long long)f->T);
                    break;
                }
        } else {
            for (int64_t b = 0; b < f->B; b++) f->len[b] = (int32_t)f->T;
        }
        for (int64_t b = 0; b < f->B; b++) src->rows += f->len[b];
    }
    if (st) {
        mp_sae_h5src_close(src);
        return st;
    }
    src->d = D;
    *d = D;
    *out = src;
    return MP_OK;
}

long mp_sae_h5src_rows(const mp_sae_h5src *src) { return src->rows; }

mp_status mp_sae_h5src_produce(void *vsrc, float *dst, int max_rows, int *got) {
    mp_sae_h5src *src = vsrc;
    *got = 0;
    if (src->rows == 0) return MP_OK;
    while (*got < max_rows) {
        if (src->cur >= src->n) {
            src->epoch++;
            src->cur = 0;
            src->b = src->t = 0;
        }
        if (src->epochs > 0 && src->epoch >= src->epochs) break;
        h5file *f = &src->files[src->cur];
        if (src->b >= f->B) {
            src->cur++;
            src->b = src->t = 0;
            continue;
        }
        int64_t len = f->len[src->b];
        if (src->t >= len) {
            src->b++;
            src->t = 0;
            continue;
        }
        int64_t want = max_rows - *got;
        if (want > src->chunk) want = src->chunk;
        if (want > len - src->t) want = len - src->t;
        hsize_t start[3] = {(hsize_t)src->b, (hsize_t)src->t, 0}, count[3] = {1, (hsize_t)want, (hsize_t)src->d};
        hid_t mem = H5Screate_simple(3, count, NULL);
        herr_t e = mem < 0 ? -1 : H5Sselect_hyperslab(f->space, H5S_SELECT_SET, start, NULL, count, NULL);
        if (e >= 0) e = H5Dread(f->ds, H5T_NATIVE_FLOAT, mem, f->space, H5P_DEFAULT, dst + (size_t)*got * src->d);
        if (mem >= 0) H5Sclose(mem);
        if (e < 0) return mp_h5_error(MP_ERR_IO, "%s: reading rows of /acts failed at [%lld, %lld]", f->path,
                                      (long long)src->b, (long long)src->t);
        *got += (int)want;
        src->t += want;
    }
    return MP_OK;
}

/* bench_train.c — training throughput of mechprobe: full AdamW steps (forward,
 * backward, clipping, update) of a Llama-style model on fixed random batches.
 * Writes the initial weights as an HDF5 checkpoint so the PyTorch peer
 * (bench/peer_torch_train.py) trains the very same model, and prints one line
 *   RESULT tokens_per_s=... step_ms=... loss0=... loss_last=... peak_rss_mb=...
 * Run one configuration per process so that peak RSS is its own.
 *
 *   bench_train --d-model 128 --layers 4 --heads 4 --d-mlp 344 --vocab 512
 *               --seq 256 --batch 16 --steps 8 --warmup-steps 2 [--init FILE.h5]
 *               [--tokens FILE.i32] */
#include "omp_env.h"
#include "bench_load.h"
#include "checkpoint.h"
#include "h5io.h"
#include "model.h"
#include "optim.h"
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int arg_int(int argc, char **argv, const char *name, int def) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return atoi(argv[i + 1]);
    return def;
}

static const char *arg_str(int argc, char **argv, const char *name) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    mp_omp_env_default(argv); /* the waiting policy of the mechprobe command */
    mp_io_init();
    mp_config c = mp_config_default();
    c.d_model = arg_int(argc, argv, "--d-model", 128);
    c.n_layer = arg_int(argc, argv, "--layers", 4);
    c.n_head = arg_int(argc, argv, "--heads", 4);
    c.n_kv_head = c.n_head;
    c.d_head = c.d_model / c.n_head;
    c.d_mlp = arg_int(argc, argv, "--d-mlp", 344);
    c.vocab = arg_int(argc, argv, "--vocab", 512);
    c.ctx = arg_int(argc, argv, "--seq", 256);
    const int B = arg_int(argc, argv, "--batch", 16), T = c.ctx;
    const int steps = arg_int(argc, argv, "--steps", 8), warm = arg_int(argc, argv, "--warmup-steps", 2);
    const char *init = arg_str(argc, argv, "--init"), *tok_path = arg_str(argc, argv, "--tokens");
    mp_model *m = NULL;
    mp_status st = mp_model_new_init(&m, &c, 1234, 0.02f);
    if (st) { fprintf(stderr, "bench_train: %s\n", mp_last_error()); return 1; }
    if (init && (st = mp_checkpoint_save(init, m, NULL, NULL))) {
        fprintf(stderr, "bench_train: %s\n", mp_last_error());
        return 1;
    }
    /* fixed random batches: tokens[t], targets = tokens shifted by one */
    size_t n = (size_t)B * (T + 1);
    int *seq = malloc(n * sizeof(int)), *tok = malloc((size_t)B * T * sizeof(int)), *tgt = malloc((size_t)B * T * sizeof(int));
    bl_fixed_batch(B, T, c.vocab, seq, tok, tgt);
    if (tok_path) { /* the peer reads the same batch */
        FILE *f = fopen(tok_path, "wb");
        if (!f || fwrite(seq, sizeof(int), n, f) != n) { fprintf(stderr, "bench_train: cannot write %s\n", tok_path); return 1; }
        fclose(f);
    }
    mp_adamw_params hp = mp_adamw_params_default();
    hp.lr = 1e-3f;
    hp.beta2 = 0.95f;
    hp.weight_decay = 0.1f;
    hp.grad_clip = 1.0f;
    mp_adamw opt;
    memset(&opt, 0, sizeof opt);   /* mp_adamw_init frees old moments: never hand it garbage */
    mp_adamw_init(&opt, &hp, 0);
    mp_train_ws ws;
    memset(&ws, 0, sizeof ws);
    double *ms = malloc((size_t)steps * sizeof(double));
    float loss = 0, loss0 = 0;
    for (int i = 0; i < warm + steps; i++) {
        double t0 = mp_now();
        if ((st = mp_train_step(m, &opt, &ws, tok, tgt, B, T, 1, NULL, &loss))) {
            fprintf(stderr, "bench_train: %s\n", mp_last_error());
            return 1;
        }
        if (i == 0) loss0 = loss;
        if (i >= warm) ms[i - warm] = 1e3 * (mp_now() - t0);
    }
    qsort(ms, (size_t)steps, sizeof(double), cmp_double);
    double med = ms[steps / 2];
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    /* matmul FLOPs of a training step per token, counted (not measured): 6 x the
     * linear layers' weights (forward 2, backward 4; the embedding is a lookup)
     * plus causal attention, 2 products of (T+1)/2 keys x H*Dh on average, x 3 */
    const double lin = (double)c.n_layer * ((double)c.d_model * c.n_head * c.d_head * 2 +
                                            (double)c.d_model * c.n_kv_head * c.d_head * 2 +
                                            (double)c.d_model * c.d_mlp * (c.mlp == MP_MLP_SWIGLU ? 3 : 2)) +
                       (double)c.vocab * c.d_model;
    const double flops_tok = 6 * lin + 6.0 * c.n_layer * (T + 1) * (double)c.n_head * c.d_head;
    printf("RESULT tokens_per_s=%.0f step_ms=%.2f loss0=%.5f loss_last=%.5f peak_rss_mb=%.1f params=%zu "
           "flops_per_token=%.6g\n",
           (double)B * T / (med / 1e3), med, loss0, loss, ru.ru_maxrss / 1024.0, mp_config_n_params(&c), flops_tok);
    mp_train_ws_free(&ws);
    mp_adamw_free(&opt);
    mp_model_free(m);
    free(seq);
    free(tok);
    free(tgt);
    free(ms);
    return 0;
}

/* peer_llmc.c — the llm.c side of bench/peers.sh's training row, built by
 * peers.sh against an llm.c source snapshot (never by mechprobe's CMake): it
 * includes llm.c's train_gpt2.c (with TESTING, as llm.c's own test_gpt2.c
 * does, so its main() is left out) and runs the same steps as its training
 * loop on the checkpoint and batch that `bench_gen --mode train-gpt2` wrote:
 * gpt2_forward, gpt2_zero_grad, gpt2_backward, gpt2_update (lr 1e-4, betas
 * 0.9/0.999, eps 1e-8, no weight decay: train_gpt2.c's settings). Prints
 * key=value lines like bench_gen: loss0 (the first step's loss), tok_s (B*T
 * over the median step after one warm-up), other_cores, maxrss_mib.
 *
 *   peer_llmc CHECKPOINT.bin TOKENS.i32 B T STEPS */
#define TESTING
#include "train_gpt2.c"

#include "bench_load.h"

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: peer_llmc CHECKPOINT.bin TOKENS.i32 B T STEPS\n");
        return 2;
    }
    const int B = atoi(argv[3]), T = atoi(argv[4]), steps = atoi(argv[5]);
    if (B < 1 || T < 1 || steps < 1) { fprintf(stderr, "peer_llmc: B, T, STEPS must be >= 1\n"); return 2; }
    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[1]);
    const size_t n = (size_t)B * (T + 1);
    int *seq = malloc(n * sizeof(int)), *tok = malloc((size_t)B * T * sizeof(int)), *tgt = malloc((size_t)B * T * sizeof(int));
    FILE *f = fopen(argv[2], "rb");
    if (!f || fread(seq, sizeof(int), n, f) != n) { fprintf(stderr, "peer_llmc: cannot read %s\n", argv[2]); return 1; }
    fclose(f);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            tok[b * T + t] = seq[b * (T + 1) + t];
            tgt[b * T + t] = seq[b * (T + 1) + t + 1];
        }
    double *tm = malloc((size_t)steps * sizeof(double));
    float loss0 = 0;
    bl_probe lp;
    for (int i = -1; i < steps; i++) {
        if (i == 0) bl_sample(&lp);
        double t0 = bl_now();
        gpt2_forward(&model, tok, tgt, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, i + 2);
        if (i == -1) loss0 = model.mean_loss;
        else tm[i] = bl_now() - t0;
    }
    double other = bl_other(&lp), med = bl_median(tm, steps);
    printf("loss0=%.6f\nloss_last=%.6f\nsteps=%d\nmedian_s=%.6f\ntok_s=%.1f\nother_cores=%.2f\nmaxrss_mib=%.1f\n", loss0,
           model.mean_loss, steps, med, B * T / med, other, bl_peak_rss_mib());
    gpt2_free(&model);
    free(seq);
    free(tok);
    free(tgt);
    free(tm);
    return 0;
}

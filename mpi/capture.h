/* capture.h — the capture workflow in one C call (`mechprobe capture`,
 * m:capture, m:capture_prompts and mp.capture all run it): the inputs (a
 * token batch, a text, this rank's prompts, or a file of one prompt a line,
 * tokenized here and split across the MPI ranks), the forward with the
 * capture's hook callbacks (after the caller's interventions), and the run
 * file written atomically:
 *
 *   - one batch (tokens [B, T] or one text): the run file of io/h5run.h
 *     (/tokens [B,T], /attention_mask with a mask, /acts/<hook> [B,T,...],
 *     /logits [B,T,V]); not collective: under mpirun call it on one rank;
 *   - a dataset (prompts, text_file or tokens_file): the ragged layout of
 *     mpi/h5capture.h (/lengths [N], /tokens [N,Tmax] padded with -1,
 *     /acts/<hook> [N,Tmax,...]); collective: every rank calls it, with its
 *     own prompts (or the same file: each rank takes lines [N r / R,
 *     N (r+1) / R) of it), and the rows land in rank order.
 *
 *   mp_capture_params p = mp_capture_params_default();
 *   p.model = m, p.tok = tok, p.out = "run.h5", p.text_file = "prompts.txt";
 *   p.hooks = "blocks.*.hook_resid_post", p.logits = 1;
 *   mp_capture_result r;
 *   st = mp_capture_run(&p, &r);   // r.n_datasets, r.n_prompts */
#ifndef MP_CAPTURE_H
#define MP_CAPTURE_H

#include "model.h"
#include "tok.h"

typedef struct {
    mp_model *model;      /* required */
    const mp_tok *tok;    /* text and text_file: the model's tokenizer (BOS as it wants) */
    const char *out;      /* required: the run file */
    const char *hooks;    /* hook names / globs, comma-separated ("*"); "" or "none": no activations */
    int logits;           /* also /logits (0) */
    int compress;         /* 0..9: shuffle + deflate (0); a dataset over several ranks: 0 only */
    mp_hooks *fwd_hooks;  /* the caller's interventions, applied before the capture reads (NULL: none);
                           * the capture adds its callbacks to this registry and clears it on return */
    /* the input: exactly one of */
    const int *tokens;    /* one batch [B, T] ... */
    int B, T;
    const int *mask;      /* ... with an attention mask [B, T] (NULL: none) */
    const char *text;     /* one prompt, tokenized with tok */
    const int32_t *lengths; /* this rank's prompts' lengths (each >= 1; non-NULL also with n_prompts 0) ... */
    const int *prompts;   /* ... their tokens, one prompt after the other */
    int n_prompts;        /* (>= 0; the ranks together: >= 1) */
    const char *text_file;   /* one prompt a line (\n or \r\n), tokenized with tok */
    const char *tokens_file; /* one prompt a line, comma-separated token ids */
    const char *file_what;   /* names the file's option in errors ("--text-file"; NULL: none) */
} mp_capture_params;

mp_capture_params mp_capture_params_default(void);

typedef struct {
    int n_datasets;       /* /acts datasets, and /logits */
    int64_t n_prompts;    /* rows: B, or N of a dataset (every rank's) */
    int T;                /* positions: T, or Tmax of a dataset */
} mp_capture_result;

/* Runs the capture (r may be NULL). Errors name the input (the file and line
 * of a bad prompt, the token outside the vocabulary), the hook glob that
 * matches nothing, or the output; no file is left under p->out then (a
 * dataset: on any rank's failure; see mpi/h5capture.h). An error in one
 * rank's share of a file returns on that rank before anything collective (the
 * caller ends the job: mechprobe aborts it). */
mp_status mp_capture_run(const mp_capture_params *p, mp_capture_result *r);

#endif

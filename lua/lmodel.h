/* lmodel.h — internals shared by the model's binding files: the Model
 * userdata (lmodel.c), interventions and Lua hooks (lintervene.c) and the
 * training methods (ltrain.c); token arguments are read by ltokarg.c. Not part
 * of the public C API. */
#ifndef MP_LMODEL_H
#define MP_LMODEL_H

#include "mp_lua.h"
#include "model.h"
#include "tok_llama2c.h"
#include "tok.h"
#include "h5run.h"
#include "train.h"

#define MODEL_MT "mechprobe.Model"
#define GUARD_MT "mechprobe.Guard"

typedef struct {
    mp_model *m;
    mp_tok *tok;        /* NULL: none, or the "bytes" hint (m->tokenizer) */
    char tok_path[1024]; /* its source: tokenizer.bin, GGUF file, tokenizer.json or HF folder */
    mp_train_ws ws;     /* training buffers (gradients, activations) */
    mp_train_log log;   /* loss curve, saved in the checkpoint's /train */
    int busy;           /* > 0 while a method that can call back into Lua runs (mp_lua_model_busy) */
    unsigned long views_gen; /* m->mem_gen when pst was made (lweights.c) */
    mp_storage *pst;    /* the storage every parameter view shares (NULL: none yet), see lweights.c */
} lmodel;
/* The model userdata's user value 1 is its optimizer (the last one used by
 * train_step / train, or the one loaded from a checkpoint). */

/* A guard is a userdata whose __gc frees C resources if a Lua error unwinds. */
typedef struct {
    mp_hooks *hooks;
    int *ints;
    mp_h5run *run;
} guard;

lmodel *mp_lua_model_check(lua_State *L, int idx);
/* Marks the model at idx in use until the calling C function returns or
 * unwinds (a to-be-closed slot pushed on the stack: call it before pushing
 * anything that must be removed later). m:close() refuses while it is in use;
 * with `exclusive` (training, which reuses the model's buffers) the method
 * itself refuses to run from inside one of the model's callbacks. */
lmodel *mp_lua_model_busy(lua_State *L, int idx, const char *method, int exclusive);
guard *mp_lua_guard_push(lua_State *L);
/* Tokens from a flat table (B = 1), a table of equal-length tables [B][T], or a
 * 1-D / 2-D Tensor, into g->ints. Every value must be an integer that fits an
 * int (errors name `what`, the position and the value); with vocab > 0 also in
 * 0..vocab-1, or -1 with `ignore` (targets). */
void mp_lua_read_tokens(lua_State *L, int idx, guard *g, int *B, int *T, const char *what, int vocab, int ignore);

/* opts.attention_mask of a call on tokens [B, T] (ltokarg.c): a table of 0/1
 * (flat for B = 1, or [B][T]) or a Tensor of that shape, checked (values,
 * shape: errors name fn); pushes a guard owning the ints and returns them,
 * or returns NULL (nothing pushed) when the option is absent. */
int *mp_lua_opt_mask(lua_State *L, int opt, const char *fn, int B, int T);
/* Pushes a padded batch of B encoded rows (n[b] tokens each, one after the
 * other in ids) as two tables
 * [B][T] (T the longest row): the tokens, padded with `pad` on the left
 * (left != 0) or the right, and the attention mask (1 real, 0 pad); the
 * padding is runtime/ragged.c's mp_pad_batch. */
void mp_lua_push_padded(lua_State *L, const int *ids, const int *n, int B, int pad, int left);
/* lconfig.c: the config from MP_CONFIG_TABLE. Pushes m.config (the fields
 * the table shows, with the values in force, then n_rope_freqs, tokenizer,
 * format, source, n_params, memory). */
void mp_lua_config_push(lua_State *L, const mp_model *m);
/* Reads a config from the options table at idx: every field under its Lua
 * key over mp_config_default() (d_model, n_layer, n_head, vocab, ctx
 * required; n_kv_head = n_head, d_head = d_model / n_head, d_mlp = 4 d_model
 * or 0 without MLP when absent); any other key but those in extra
 * (NULL-terminated) is an error. Does not validate. */
void mp_lua_config_read(lua_State *L, int idx, const char *fn, const char *const *extra, mp_config *c);
/* mp.model.config_fields() -> {{key=, attr=, type=, names=}, ...} in table order. */
int mp_lua_config_fields(lua_State *L);

/* lintervene.c: registers opts.fwd_hooks = { {name_or_glob, function | Intervention}, ... }
 * into g->hooks (pushes one table that keeps the functions alive: leave it on the
 * stack while the hooks can fire; returns its index), and mp.ablate / mp.patch /
 * mp.steer / mp.scale. Interventions' positions= must be < n_pos (the positions
 * the call will run; 0: unchecked). A Lua hook function never raises through
 * the forward pass: its error is recorded in that table and makes the forward
 * fail; after a failed forward call mp_lua_hooks_rethrow(L, ftbl), which raises
 * the recorded error object (if any), then report the mp_status. */
int mp_lua_add_fwd_hooks(lua_State *L, int opt, guard *g, int n_pos);
/* The same for the list under opts[field] into the registry `hooks` (bwd_hooks). */
int mp_lua_add_hooks_opt(lua_State *L, int opt, mp_hooks *hooks, int n_pos, const char *field);
void mp_lua_hooks_rethrow(lua_State *L, int ftbl);
void mp_lua_open_interventions(lua_State *L);

/* lgrad.c: gradients. mp_lua_grad_wanted: do the options at opt ask for a
 * loss, incl_bwd or bwd_hooks? mp_lua_run_grad: run_common's forward for such
 * a call (a training-mode forward, the metric, the backward): returns logits
 * and the cache (with NAME_grad and .loss) or, without a cache, the metric's
 * value. mp_lua_open_grad: mp.attribution_patch. */
int mp_lua_grad_wanted(lua_State *L, int opt);
int mp_lua_run_grad(lua_State *L, lmodel *lm, guard *g, int B, int T, int opt, const char *fn, int ftbl,
                    int cache_idx, const char *globs, mp_tensor *logits, int li);
void mp_lua_open_grad(lua_State *L);
/* lweights.c: m:params, m:param (views), TransformerLens's weight shortcuts
 * (W_Q, ... as methods), m:set_weight, m:process_weights. */
extern const luaL_Reg mp_lua_weight_methods[];
/* Pushes the field m.W_E, m.W_pos or m.W_U (a copy in TL's shape; m.b_U raises
 * an error saying the model has none) of the model at idx and returns 1; 0
 * (nothing pushed) for any other key. */
int mp_lua_weights_index(lua_State *L, int idx, const char *key);
/* Invalidates the parameter views (m:param and every view derived from them:
 * they share one storage) of the model at idx when it was closed ("the model
 * was closed") or its parameter memory was replaced since the views were made
 * (mp_model.mem_gen moved: `why`, or a generic reason when NULL); a no-op
 * otherwise (cheap: call it wherever the memory may go). */
void mp_lua_params_detach(lua_State *L, int idx, const char *why);
/* mp.load's options for TL's weight processing (default false, as
 * from_pretrained_no_processing) and their application to the model at
 * `model` (an explicit true that does not apply is an error naming why). */
#define MP_LUA_LOAD_PROCESS_KEYS "fold_ln", "center_writing_weights", "center_unembed", "fold_value_biases"
void mp_lua_load_process(lua_State *L, int opt, int model);

/* ltrain.c: the Model's training methods (train_step, train, loss). */
extern const luaL_Reg mp_lua_train_methods[];
/* lcapture.c: m:capture and m:capture_prompts, bindings of mp_capture_run
 * (mpi/capture.h); added to the model methods by mp_lua_open_model. */
extern const luaL_Reg mp_lua_capture_methods[];
/* ldevice.c: m:to; the device= / precision= options (read: parsed, and a cuda
 * device checked for at once; move: after loading); m.device / m.precision
 * (1 when k is one of them, its value pushed); mp.cuda (into the table on top). */
extern const luaL_Reg mp_lua_device_methods[];
void mp_lua_device_read(lua_State *L, int opt, const char *fn, mp_device *d, mp_precision *p);
void mp_lua_device_move(lua_State *L, lmodel *lm, const char *fn, mp_device d, mp_precision p);
int mp_lua_device_index(lua_State *L, lmodel *lm, const char *k);
void mp_lua_open_device(lua_State *L);

/* Gives the table at `cache` (run_with_cache's result for model at `model`,
 * batch B x T) the ActivationCache methods (lua/lcache.c). */
void mp_lua_cache_attach(lua_State *L, int cache, int model, int B, int T);

#endif

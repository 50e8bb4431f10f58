/* lmodel.h — internals shared by the model's binding files: the Model
 * userdata (lmodel.c), interventions and Lua hooks (lintervene.c) and the
 * training methods (ltrain.c). Not part of the public C API. */
#ifndef MP_LMODEL_H
#define MP_LMODEL_H

#include "mp_lua.h"
#include "model.h"
#include "tokenizer.h"
#include "bpe.h"
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
guard *mp_lua_guard_push(lua_State *L);
/* Tokens from a flat table (B = 1), a table of equal-length tables [B][T], or a
 * 1-D / 2-D Tensor, into g->ints. */
void mp_lua_read_tokens(lua_State *L, int idx, guard *g, int *B, int *T);
/* Options table helpers (opt = stack index of the table, or 0). */
int mp_lua_opt_bool(lua_State *L, int opt, const char *key, int def);
lua_Number mp_lua_opt_num(lua_State *L, int opt, const char *key, lua_Number def);
/* Pushes the comma-joined globs of opts[key] (string or list of strings) or def. */
const char *mp_lua_opt_globs(lua_State *L, int opt, const char *key, const char *def);

/* lintervene.c: registers opts.fwd_hooks = { {name_or_glob, function | Intervention}, ... }
 * into g->hooks (pushes one table that keeps the functions alive: leave it on the
 * stack while the hooks can fire), and mp.ablate / mp.patch / mp.steer / mp.scale. */
void mp_lua_add_fwd_hooks(lua_State *L, int opt, guard *g);
void mp_lua_open_interventions(lua_State *L);

/* ltrain.c: the Model's training methods (train_step, train, loss). */
extern const luaL_Reg mp_lua_train_methods[];
/* lcapture.c: m:capture_prompts (dataset captures, split across MPI ranks). */
extern const luaL_Reg mp_lua_capture_methods[];

#endif

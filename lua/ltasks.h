/* ltasks.h — internals shared by the task bindings (ltasks.c: common
 * plumbing, MTD, text, retrieval and mp.tasks; ltasks_algebra.c: the
 * in-context algebra task): the task userdata and its type table, option
 * parsing with errors that name the option, and batch buffers. */
#ifndef MP_LTASKS_H
#define MP_LTASKS_H

#include "mp_lua.h"

typedef struct task_type task_type;
struct task_type {
    const char *mt;                               /* metatable name */
    const char *name;                             /* "MTDTask" (in messages) */
    void (*free_fn)(void *h);
    int (*field)(lua_State *L, void *h, const char *key);   /* pushes a field: 1, or 0 */
    void (*describe)(void *h, char *buf, size_t n);         /* __tostring text */
};

typedef struct {
    void *h;   /* the C task; NULL once closed */
} ltask;

typedef struct {
    mp_tensor *tok, *tgt;
    void *p[4];
} batch;

void *lt_check_task(lua_State *L, int idx, const task_type *tt);
ltask *lt_push_task(lua_State *L, const task_type *tt);
const task_type *lt_upvalue_type(lua_State *L);
int lt_t_close(lua_State *L);
int lt_t_tostring(lua_State *L);
int lt_t_index(lua_State *L);
void lt_register_type(lua_State *L, const task_type *tt, const luaL_Reg *methods);
int lt_fail(lua_State *L, const char *where, const char *cprefix);
int lt_opt_int(lua_State *L, int idx, const char *fn, const char *key, int def, int lo, int hi);
uint64_t lt_opt_seed(lua_State *L, int idx, const char *fn);
int lt_arg_count(lua_State *L, int arg, const char *fn, const char *what, int lo);
int lt_m_seed_common(lua_State *L, const char *fn, uint64_t *seed);
void lt_batch_free(batch *bt);
void *lt_batch_alloc(lua_State *L, batch *bt, int i, size_t n, size_t size, const char *fn);
void lt_batch_begin(lua_State *L, batch *bt, int B, int T);
void lt_batch_ids(lua_State *L, batch *bt, const char *fn);
void lt_batch_end(batch *bt, mp_status st);
int32_t *lt_arg_ids(lua_State *L, int arg, const char *fn, const char *what, int hi, size_t *n);
void lt_set_int(lua_State *L, const char *k, lua_Integer v);
void lt_set_num(lua_State *L, const char *k, lua_Number v);
void lt_set_str(lua_State *L, const char *k, const char *v);
void lt_set_bool(lua_State *L, const char *k, int v);

/* the algebra task (ltasks_algebra.c) */
extern const task_type MP_LT_ALGEBRA_TYPE;
extern const luaL_Reg mp_lt_algebra_methods[];
int mp_lt_l_algebra(lua_State *L);
int mp_lt_l_algebra_solve(lua_State *L);
int mp_lt_l_algebra_rules(lua_State *L);

#endif

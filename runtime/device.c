/* device.c — the names of devices and precisions and their parsers (device.h);
 * one place, so the CLI, mp.load, mp.model.new and m:to word errors alike.
 * And the registry of the forward's op tables (exec.h): the CPU's
 * (model.c) statically, a backend's when it registers. */
#include "device.h"
#include "exec.h"

#include <pthread.h>
#include <string.h>

static const char *const dev_names[] = {"cpu", "cuda"};
static const char *const prec_names[] = {"fp32", "bf16"};

const char *mp_device_name(mp_device d) { return (unsigned)d < 2 ? dev_names[d] : "?"; }
const char *mp_precision_name(mp_precision p) { return (unsigned)p < 2 ? prec_names[p] : "?"; }

mp_status mp_device_parse(const char *s, const char *what, mp_device *out) {
    for (int i = 0; i < 2; i++)
        if (s && strcmp(s, dev_names[i]) == 0) {
            *out = (mp_device)i;
            return MP_OK;
        }
    return mp_error(MP_ERR_ARG, "%s: device must be \"cpu\" or \"cuda\" (got \"%s\")", what, s ? s : "(nothing)");
}

mp_status mp_precision_parse(const char *s, const char *what, mp_precision *out) {
    for (int i = 0; i < 2; i++)
        if (s && strcmp(s, prec_names[i]) == 0) {
            *out = (mp_precision)i;
            return MP_OK;
        }
    return mp_error(MP_ERR_ARG, "%s: precision must be \"fp32\" or \"bf16\" (got \"%s\")", what, s ? s : "(nothing)");
}

/* ---- the op tables' registry ---- */


static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static const mp_exec_ops *reg[MP_EXEC_MAX] = {&mp_exec_cpu};
static int reg_n = 1;

mp_status mp_exec_register(const mp_exec_ops *o) {
    if (!o) return mp_error(MP_ERR_ARG, "mp_exec_register: the op table is NULL");
    if (o->version != MP_EXEC_OPS_VERSION)
        return mp_error(MP_ERR_ARG, "mp_exec_register: op table \"%s\" has version %d; this runtime walks version %d",
                        o->name ? o->name : "(unnamed)", o->version, MP_EXEC_OPS_VERSION);
    if (!o->name || !o->name[0]) return mp_error(MP_ERR_ARG, "mp_exec_register: the op table has no name");
    const struct { const void *fn; const char *what; } req[] = {
        {(const void *)o->view, "view"},           {(const void *)o->embed, "embed"},
        {(const void *)o->learned_pos, "learned_pos"}, {(const void *)o->norm, "norm"},
        {(const void *)o->linear, "linear"},       {(const void *)o->linears, "linears"},
        {(const void *)o->pos_apply, "pos_apply"}, {(const void *)o->kv_append, "kv_append"},
        {(const void *)o->attention, "attention"}, {(const void *)o->act, "act"},
        {(const void *)o->copy, "copy"},           {(const void *)o->add, "add"},
        {(const void *)o->head, "head"}, {(const void *)o->qk_norm, "qk_norm"}};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (!req[i].fn)
            return mp_error(MP_ERR_ARG, "mp_exec_register: op table \"%s\" lacks the required op %s", o->name,
                            req[i].what);
    mp_status st = MP_OK;
    pthread_mutex_lock(&reg_lock);
    int i = 0;
    while (i < reg_n && reg[i] != o && strcmp(reg[i]->name, o->name) != 0) i++;
    if (i < reg_n && reg[i] != o)
        st = mp_error(MP_ERR_ARG, "mp_exec_register: another op table is registered as \"%s\"", o->name);
    else if (i == reg_n && reg_n == MP_EXEC_MAX)
        st = mp_error(MP_ERR_ARG, "mp_exec_register: the registry is full (%d op tables)", MP_EXEC_MAX);
    else if (i == reg_n)
        reg[reg_n++] = o;
    pthread_mutex_unlock(&reg_lock);
    return st;
}

const mp_exec_ops *mp_exec_lookup(const char *name) {
    const mp_exec_ops *o = NULL;
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < reg_n && !o && name; i++)
        if (strcmp(reg[i]->name, name) == 0) o = reg[i];
    pthread_mutex_unlock(&reg_lock);
    return o;
}

const mp_exec_ops *mp_exec_for_device(mp_device d) {
    const mp_exec_ops *o = NULL;
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < reg_n && !o; i++)
        if (reg[i]->device == d) o = reg[i];
    pthread_mutex_unlock(&reg_lock);
    return o;
}

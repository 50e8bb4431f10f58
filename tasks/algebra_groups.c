/* algebra_groups.c — multiplication tables of the finite groups used by the
 * in-context algebra task: C_n, D_n, Q8, C2xC4, C2xC2xC2 (encodings in algebra.h). */
#include "algebra.h"

#include <assert.h>
#include <stdio.h>

int mp_algebra_group_order(mp_algebra_group g) {
    switch (g.family) {
    case MP_ALGEBRA_CYCLIC: return g.n >= 1 && g.n <= 16 ? g.n : 0;
    case MP_ALGEBRA_DIHEDRAL: return g.n >= 1 && g.n <= 8 ? 2 * g.n : 0;
    case MP_ALGEBRA_Q8:
    case MP_ALGEBRA_C2XC4:
    case MP_ALGEBRA_C2XC2XC2: return 8;
    }
    return 0;
}

/* Quaternion units 1, i, j, k (0..3): product unit and sign (1 = negative). */
static const unsigned char q8_unit[4][4] = {
    {0, 1, 2, 3}, {1, 0, 3, 2}, {2, 3, 0, 1}, {3, 2, 1, 0}};
static const unsigned char q8_sign[4][4] = {
    {0, 0, 0, 0},   /* 1*1=1  1*i=i   1*j=j   1*k=k  */
    {0, 1, 0, 1},   /* i*1=i  i*i=-1  i*j=k   i*k=-j */
    {0, 1, 1, 0},   /* j*1=j  j*i=-k  j*j=-1  j*k=i  */
    {0, 0, 1, 1}};  /* k*1=k  k*i=j   k*j=-i  k*k=-1 */

int mp_algebra_group_mul(mp_algebra_group g, int x, int y) {
    int order = mp_algebra_group_order(g);
    assert(order > 0 && x >= 0 && x < order && y >= 0 && y < order);
    (void)order;
    switch (g.family) {
    case MP_ALGEBRA_CYCLIC:
        return (x + y) % g.n;
    case MP_ALGEBRA_DIHEDRAL: {
        int n = g.n, i = x % n, j = x / n, k = y % n, l = y / n;
        int r = j ? (i - k + n) % n : (i + k) % n;
        return r + n * ((j + l) & 1);
    }
    case MP_ALGEBRA_Q8: {
        int s = (x >> 2) ^ (y >> 2) ^ q8_sign[x & 3][y & 3];
        return 4 * s + q8_unit[x & 3][y & 3];
    }
    case MP_ALGEBRA_C2XC4:
        return 4 * (((x >> 2) + (y >> 2)) & 1) + (((x & 3) + (y & 3)) & 3);
    case MP_ALGEBRA_C2XC2XC2:
        return x ^ y;
    }
    return -1;
}

const char *mp_algebra_group_name(mp_algebra_group g, char *buf) {
    switch (g.family) {
    case MP_ALGEBRA_CYCLIC: snprintf(buf, 16, "C%d", g.n); break;
    case MP_ALGEBRA_DIHEDRAL: snprintf(buf, 16, "D%d", g.n); break;
    case MP_ALGEBRA_Q8: snprintf(buf, 16, "Q8"); break;
    case MP_ALGEBRA_C2XC4: snprintf(buf, 16, "C2xC4"); break;
    case MP_ALGEBRA_C2XC2XC2: snprintf(buf, 16, "C2xC2xC2"); break;
    default: snprintf(buf, 16, "?"); break;
    }
    return buf;
}

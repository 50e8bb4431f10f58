/* merge_heap.h — the candidate heap of both tokenizers' merge loops (byte-level
 * BPE in tok.c: lowest merge rank first; llama2.c in tok_llama2c.c: highest
 * piece score first). A candidate merges the adjacent symbols at l and r into
 * id and is stale once either side has changed (its version differs from vl /
 * vr). Private to runtime/; static inline so each loop keeps its speed. */
#ifndef MP_MERGE_HEAP_H
#define MP_MERGE_HEAP_H

/* key: the priority, smaller first (a rank, or minus a score: exact in double) */
typedef struct { double key; int l, r, id; unsigned vl, vr; } mp_merge_cand;

/* a goes before b: smaller key, the leftmost among equal keys */
static inline int mp_merge_first(const mp_merge_cand *a, const mp_merge_cand *b) {
    return a->key < b->key || (a->key == b->key && a->l < b->l);
}

static inline void mp_merge_push(mp_merge_cand *h, int *n, mp_merge_cand c) {
    int i = (*n)++;
    while (i > 0 && mp_merge_first(&c, &h[(i - 1) / 2])) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = c;
}

/* Removes and returns the first candidate (*n > 0). */
static inline mp_merge_cand mp_merge_pop(mp_merge_cand *h, int *n) {
    mp_merge_cand top = h[0], last = h[--(*n)];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && mp_merge_first(&h[c + 1], &h[c])) c++;
        if (!mp_merge_first(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

#endif

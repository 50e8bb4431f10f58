/* retrieval.h — passkey and key-value recall inside filler, at any length, with
 * the positions of the needle and of the answer known (long-context probes).
 *
 * Vocabulary (mp_retrieval_vocab() = 18 + n_filler + key_symbols tokens):
 *   0..9   digits "0".."9"
 *   10     BOS
 *   11 "the"  12 "pass"  13 "key"  14 "is"  15 "what"  16 "?"  17 "."
 *   18..   filler words f0 .. f(n_filler-1)
 *   then   key symbols k0 .. k(key_symbols-1) (key_symbols > 0 only)
 * Passkey (n_keys = 1), value v = v1..vL (value_len random digits):
 *   needle: the pass key is v1 .. vL .
 *   query : what is the pass key ? v1 .. vL          (ends the sequence)
 * Key-value (n_keys > 1): n_keys needles with distinct keys k = k1..kK (key_len
 * random digits, or with key_symbols = S > 0 key_len random symbols of their own
 * S tokens, as RULER's keys are words and its values numbers) and random values;
 * one of them (the queried one) is asked for:
 *   needle: key k1 .. kK is v1 .. vL .
 *   query : what is key k1 .. kK ? v1 .. vL
 * The distractor needles' values never equal the queried value, so a model
 * that copies the value of a random needle is right 1 time in n_keys (the
 * chance level the rope_id probe states; guessing digits: 10^-value_len).
 * Variable tracking (hops = h >= 1, after RULER's "variable tracking"): n_keys
 * chains, each a value needle and h links that each name the previous key,
 * all keys distinct, a chain's needles in order:
 *   key a1..aK is v1 .. vL .   ...   key b1..bK is key a1..aK .   ... (h links)
 *   query : what is key z1..zK ? v1 .. vL     (z: chain 0's last key)
 * so the answer takes h + 1 lookups; the other chains are distractors of the
 * same form (values never the answer). Needle offsets are uniform (depth must
 * be random); needle_pos / value_pos are chain 0's value needle.
 * Layout of T tokens: [BOS] filler with the needles inserted, then the query, so
 * the last value_len tokens are the answer. Filler is i.i.d. uniform filler words
 * (FILLER_RANDOM) or the words f0 f1 ... cycled (FILLER_REPEAT, like the
 * repeated "the grass is green" text). The queried needle starts after
 * round(depth * F) of the F filler tokens (depth in [0, 1]; depth < 0 draws it
 * uniformly per sample); the other needles go at uniform filler offsets.
 * Targets: targets[t] = tokens[t+1] where tokens[t+1] is an answer digit
 * (t = answer_pos-1 .. T-2), else -1: the model must produce the value after
 * "?". With n_queries = q > 1 (keyed tasks, for training) the query is preceded
 * by q - 1 queries "what is key z ? v ." (z: the last key of a chain drawn
 * uniformly, with repetition and chain 0 included, so that the earlier answers
 * do not give the last one away by elimination; v its value), whose answer
 * digits are targets too; the final query and the truth are as with q = 1.
 * Every draw goes through the task's seeded MT19937 stream (q = 1 draws exactly
 * as before). */
#ifndef MP_RETRIEVAL_H
#define MP_RETRIEVAL_H

#include <stdint.h>

#include "mp_common.h"

enum {
    MP_RETRIEVAL_DIGIT0 = 0,   /* .. 9 */
    MP_RETRIEVAL_BOS = 10,
    MP_RETRIEVAL_THE = 11,
    MP_RETRIEVAL_PASS = 12,
    MP_RETRIEVAL_KEY = 13,
    MP_RETRIEVAL_IS = 14,
    MP_RETRIEVAL_WHAT = 15,
    MP_RETRIEVAL_QMARK = 16,
    MP_RETRIEVAL_DOT = 17,
    MP_RETRIEVAL_FILLER0 = 18
};

#define MP_RETRIEVAL_MAX_DIGITS 32
#define MP_RETRIEVAL_MAX_KEYS 1024   /* needles: n_keys * (1 + hops) */
#define MP_RETRIEVAL_MAX_HOPS 64
#define MP_RETRIEVAL_MAX_QUERIES 64

typedef enum { MP_RETRIEVAL_FILLER_RANDOM = 0, MP_RETRIEVAL_FILLER_REPEAT } mp_retrieval_filler;

typedef struct {
    int n_keys;                  /* 1: passkey; > 1: key-value pairs, one queried; hops > 0: chains */
    int hops;                    /* 0: off; h >= 1: variable tracking, h links per chain (1..64) */
    int key_len;                 /* digits (symbols) per key (key-value mode), 1..32 */
    int key_symbols;             /* 0: keys are digits; S in 1..65536: keys are made of S key-only tokens */
    int value_len;               /* digits of the pass key / value, 1..32 */
    int n_filler;                /* filler vocabulary, 1..65536 */
    mp_retrieval_filler filler;
    double depth;                /* queried needle depth in [0, 1]; < 0: uniform random */
    int bos;                     /* 1: tokens[0] = BOS */
    int n_queries;               /* keyed tasks: 1 (default): the one query; q in 2..64: q - 1 earlier
                                  * queries of random chains, each answer a target (a denser training
                                  * signal); the last query and the truth stay chain 0's */
    uint64_t seed;
} mp_retrieval_params;

typedef struct {
    int32_t value[MP_RETRIEVAL_MAX_DIGITS]; /* the digits to recall */
    int32_t key[MP_RETRIEVAL_MAX_DIGITS];   /* the queried key's tokens (key-value and variable tracking) */
    int needle_pos;   /* first token of the queried needle ("the" / "key") */
    int value_pos;    /* first value digit inside the needle */
    int answer_pos;   /* first answer digit (= T - value_len) */
    double depth;     /* filler tokens before the needle / all filler tokens */
} mp_retrieval_truth;

typedef struct mp_retrieval mp_retrieval;

/* Passkey: n_keys 1, hops 0, key_len 2, digit keys, value_len 5, 32 filler words,
 * random filler, random depth, BOS, seed 1. */
mp_retrieval_params mp_retrieval_params_default(void);
int mp_retrieval_vocab(const mp_retrieval_params *p);
/* The shortest T that holds BOS, the needles and the query (no filler). */
int mp_retrieval_min_len(const mp_retrieval_params *p);
/* A printable name of token id of a task with params p ("7", "<bos>", "the",
 * "f12", "k3") into buf (>= 16 bytes). */
const char *mp_retrieval_token_name(const mp_retrieval_params *p, int id, char *buf);

mp_status mp_retrieval_new(mp_retrieval **out, const mp_retrieval_params *p);
void mp_retrieval_free(mp_retrieval *r);  /* NULL-safe */
void mp_retrieval_seed(mp_retrieval *r, uint64_t seed);
const mp_retrieval_params *mp_retrieval_get_params(const mp_retrieval *r);

/* B sequences of T tokens: tokens, targets int32 [B, T]; truth [B] or NULL.
 * MP_ERR_ARG when T < mp_retrieval_min_len. */
mp_status mp_retrieval_sample(mp_retrieval *r, int B, int T, int32_t *tokens, int32_t *targets,
                              mp_retrieval_truth *truth);

#endif

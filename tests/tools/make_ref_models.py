#!/usr/bin/python3
"""make_ref_models.py — writes the small random llama2.c checkpoints under
tests/data/ that exercise what the shared model does not: grouped-query
attention, an untied classifier, the v1 ("ak42") header, and (through two token
sequences) batch > 1. Golden activations for them come from the independent
PyTorch reference ../shared/tools/ref_llama.py.

Exact commands (run from the repository root, Debian's python3 with numpy,
torch and h5py):

  /usr/bin/python3 tests/tools/make_ref_models.py tests/data
  /usr/bin/python3 ../shared/tools/ref_llama.py tests/data/ref_gqa_untied.bin \
      tests/data/ref_gqa_untied_a.h5 \
      --tokens 1,5,9,13,17,21,25,29,33,37,41,45,49,53,57,61,2,6,10,14
  /usr/bin/python3 ../shared/tools/ref_llama.py tests/data/ref_gqa_untied.bin \
      tests/data/ref_gqa_untied_b.h5 \
      --tokens 1,63,7,7,30,0,12,44,3,3,3,58,21,8,50,39,16,27,62,11
  /usr/bin/python3 ../shared/tools/ref_llama.py tests/data/ref_tied.bin \
      tests/data/ref_tied.h5 --greedy 16

Files written by this script:
  ref_gqa_untied.bin     llama2.c v0: d_model 48, 2 layers, 4 heads, 2 kv heads,
                         d_mlp 96, vocab 64, ctx 32, untied classifier (seed 1234)
  ref_gqa_untied_v1.bin  the same weights in the v1 layout
  ref_tied.bin           llama2.c v0: d_model 32, 2 layers, 2 heads, 2 kv heads,
                         d_mlp 64, vocab 40, ctx 24, tied classifier (seed 22: its greedy
                         continuation is varied and every step wins by > 0.1 logits)
Weights ~ N(0, 0.2); norm weights ~ 1 + N(0, 0.1). The ref_*.h5 files follow
the run-file schema (/tokens [1,20], /logits, /acts/<hook>), one per sequence.
"""
import os, struct, sys
import numpy as np

def make_weights(dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len, tied, seed):
    rng = np.random.default_rng(seed)
    hs = dim // n_heads
    def w(*shape): return (rng.standard_normal(shape) * 0.2).astype('<f4')
    def norm(*shape): return (1.0 + rng.standard_normal(shape) * 0.1).astype('<f4')
    W = dict(emb=w(vocab, dim), rms_att=norm(n_layers, dim),
             wq=w(n_layers, n_heads * hs, dim), wk=w(n_layers, n_kv * hs, dim),
             wv=w(n_layers, n_kv * hs, dim), wo=w(n_layers, dim, n_heads * hs),
             rms_ffn=norm(n_layers, dim), w1=w(n_layers, hidden, dim),
             w2=w(n_layers, dim, hidden), w3=w(n_layers, hidden, dim), rms_final=norm(dim))
    W['wcls'] = W['emb'] if tied else w(vocab, dim)
    hdr = (dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len)
    return hdr, tied, W

def freq_cis(dim, n_heads, seq_len, theta=10000.0):
    # llama2.c model.py precompute_freqs_cis: cos/sin of t * theta^(-2i/hs)
    hs = dim // n_heads
    freqs = 1.0 / theta ** (np.arange(0, hs, 2)[: hs // 2].astype(np.float64) / hs)
    ang = np.outer(np.arange(seq_len, dtype=np.float64), freqs)
    return np.cos(ang).astype('<f4'), np.sin(ang).astype('<f4')

def write_v0(path, hdr, tied, W):
    dim, hidden, nl, nh, nkv, vocab, seq = hdr
    fc, fs = freq_cis(dim, nh, seq)
    with open(path, 'wb') as f:
        f.write(struct.pack('<7i', dim, hidden, nl, nh, nkv, vocab if tied else -vocab, seq))
        for k in ('emb', 'rms_att', 'wq', 'wk', 'wv', 'wo', 'rms_ffn', 'w1', 'w2', 'w3', 'rms_final'):
            f.write(W[k].tobytes())
        f.write(fc.tobytes()); f.write(fs.tobytes())
        if not tied: f.write(W['wcls'].tobytes())

def write_v1(path, hdr, tied, W):
    # export.py version1_export: magic, version, 7 ints, uint8 shared, pad to 256;
    # norms first (attention, ffn, final), then embedding and the matrices.
    with open(path, 'wb') as f:
        f.write(struct.pack('<Ii', 0x616b3432, 1))
        f.write(struct.pack('<7i', *hdr))
        f.write(struct.pack('B', int(tied)))
        f.write(b'\0' * (256 - f.tell()))
        for k in ('rms_att', 'rms_ffn', 'rms_final', 'emb', 'wq', 'wk', 'wv', 'wo', 'w1', 'w2', 'w3'):
            f.write(W[k].tobytes())
        if not tied: f.write(W['wcls'].tobytes())

def main():
    out = sys.argv[1] if len(sys.argv) > 1 else 'tests/data'
    os.makedirs(out, exist_ok=True)
    hdr, tied, W = make_weights(48, 96, 2, 4, 2, 64, 32, False, 1234)
    write_v0(os.path.join(out, 'ref_gqa_untied.bin'), hdr, tied, W)
    write_v1(os.path.join(out, 'ref_gqa_untied_v1.bin'), hdr, tied, W)
    hdr, tied, W = make_weights(32, 64, 2, 2, 2, 40, 24, True, 22)
    write_v0(os.path.join(out, 'ref_tied.bin'), hdr, tied, W)

if __name__ == '__main__':
    main()

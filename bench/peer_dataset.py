#!/usr/bin/python3
"""peer_dataset.py — the PyTorch + h5py peer of bench/dataset.sh: an activation
dataset (hook_resid_post of every layer, one row per sequence) written the way a
TransformerLens-style user writes one: a straightforward Llama forward in torch
eager (bench/peer_torch.py's), register_forward_hook on each block, and the hook
copying the block's output into h5py datasets laid out as mechprobe's capture
lays them out (names, dtype, chunks, fill value read from a mechprobe run file).

usage:
  peer_dataset.py run MODEL.gguf TOKENS.txt OUT.h5 --layout REF.h5 [--threads N]
      MODEL: a llama GGUF; F32, F16 and BF16 tensors are read (numpy, from the
      file: the same weights as mechprobe); any other tensor type gives random
      N(0, 0.02) weights of the same shapes, and weights=random says so.
      TOKENS: one sequence a line, comma-separated ids (mechprobe capture's
      --tokens-file). REF: a mechprobe dataset capture (its /acts/* layout is
      copied; N and Tmax come from TOKENS). The file is fsync'ed before the
      clock stops, as mechprobe commits its file. Prints key=value lines.
  peer_dataset.py info MODEL.gguf
      Prints the shape (vocab, n_layer, d_model, ...) and tensor types.
  peer_dataset.py check FILE.h5 --n N --tmax T --layers L --d-model D
                        [--save ROW.npy] [--against ROW.npy]
      Checks a dataset capture: /acts/blocks.{l}.hook_resid_post [N, T, D]
      float32 for every layer, /lengths, and finite values in the first, middle
      and last rows; --save keeps row 0 of the last layer; --against compares it
      with a saved one (rel_diff = max|a - b| / max|b|). Reads only those rows.
Needs numpy and h5py (check, info); run also needs Debian's python3-torch.
"""
import argparse, os, re, resource, struct, sys, time
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- GGUF (formats/gguf.c's layout): header, metadata, tensor infos, aligned data ----
GGUF_SCALAR = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<?', 10: '<Q', 11: '<q', 12: '<d'}
GGML_NP = {0: np.dtype('<f4'), 1: np.dtype('<f2'), 30: np.dtype('<u2')}   # F32, F16, BF16 (decoded below)
GGML_NAME = {0: 'F32', 1: 'F16', 2: 'Q4_0', 3: 'Q4_1', 8: 'Q8_0', 10: 'Q2_K', 11: 'Q3_K', 12: 'Q4_K', 13: 'Q5_K',
             14: 'Q6_K', 30: 'BF16'}


class GGUF:
    """Metadata and tensors of a GGUF file (read-only memory map)."""

    def __init__(self, path):
        self.path = path
        try:
            self.raw = np.memmap(path, dtype=np.uint8, mode='r')
        except (OSError, ValueError) as e:
            sys.exit(f'peer_dataset.py: {path}: cannot map: {e}')
        self.mv = memoryview(self.raw)   # struct and slices read it without copies of the map
        self.pos = 0
        if bytes(self.raw[:4]) != b'GGUF':
            sys.exit(f'peer_dataset.py: {path}: not a GGUF file (magic {bytes(self.raw[:4])!r})')
        self.pos = 4
        ver = self._u('<I')
        if ver not in (2, 3):
            sys.exit(f'peer_dataset.py: {path}: GGUF version {ver} (2 or 3 are read)')
        n_t, n_kv = self._u('<Q'), self._u('<Q')
        self.meta = {}
        for _ in range(n_kv):
            k = self._str()
            self.meta[k] = self._val(self._u('<I'))
        self.tensors = {}
        for _ in range(n_t):
            name = self._str()
            nd = self._u('<I')
            dims = [self._u('<Q') for _ in range(nd)]
            self.tensors[name] = (dims, self._u('<I'), self._u('<Q'))
        al = int(self.meta.get('general.alignment', 32))
        self.data = (self.pos + al - 1) // al * al

    def _u(self, fmt):
        n = struct.calcsize(fmt)
        if self.pos + n > self.raw.size:
            sys.exit(f'peer_dataset.py: {self.path}: truncated header at offset {self.pos}')
        v, = struct.unpack_from(fmt, self.mv, self.pos)
        self.pos += n
        return v

    def _str(self):
        n = self._u('<Q')
        if self.pos + n > self.raw.size:
            sys.exit(f'peer_dataset.py: {self.path}: truncated header at offset {self.pos}')
        s = self.mv[self.pos:self.pos + n].tobytes().decode('utf-8', 'replace')
        self.pos += n
        return s

    def _val(self, t):
        if t == 8:
            return self._str()
        if t == 9:
            et, n = self._u('<I'), self._u('<Q')
            if et in GGUF_SCALAR and et != 7:   # numeric arrays: one read (a tokenizer's scores)
                dt = np.dtype(GGUF_SCALAR[et])
                if self.pos + n * dt.itemsize > self.raw.size:
                    sys.exit(f'peer_dataset.py: {self.path}: truncated header at offset {self.pos}')
                a = np.frombuffer(self.raw, dtype=dt, count=n, offset=self.pos)
                self.pos += n * dt.itemsize
                return a
            return [self._val(et) for _ in range(n)]
        if t not in GGUF_SCALAR:
            sys.exit(f'peer_dataset.py: {self.path}: metadata value type {t} unknown')
        return self._u(GGUF_SCALAR[t])

    def arch_key(self, key, default=None):
        arch = self.meta.get('general.architecture', 'llama')
        return self.meta.get(f'{arch}.{key}', default)

    def shape(self, name):
        if name not in self.tensors:
            sys.exit(f'peer_dataset.py: {self.path}: tensor {name} is missing')
        return tuple(reversed(self.tensors[name][0]))   # ggml dims {in, out} -> numpy [out, in]

    def readable(self, name):
        return self.tensors[name][1] in GGML_NP

    def f32(self, name):
        """The tensor as a float32 numpy array [out, in] (F32, F16 or BF16)."""
        dims, t, off = self.tensors[name]
        shape, n = self.shape(name), int(np.prod(dims))
        if self.data + off + n * GGML_NP[t].itemsize > self.raw.size:
            sys.exit(f'peer_dataset.py: {self.path}: tensor {name} runs past the end of the file (truncated?)')
        a = np.frombuffer(self.raw, dtype=GGML_NP[t], count=n, offset=self.data + off)
        if t == 30:
            a = (a.astype(np.uint32) << 16).view(np.float32)
        return np.array(a, dtype=np.float32).reshape(shape)   # a copy: the map is read-only


def llama_config(g):
    if g.meta.get('general.architecture', 'llama') != 'llama':
        sys.exit(f'peer_dataset.py: {g.path}: architecture {g.meta.get("general.architecture")!r}; '
                 'this peer runs llama GGUFs')
    vocab, D = g.shape('token_embd.weight')
    nh = int(g.arch_key('attention.head_count'))
    cfg = dict(d_model=D, vocab=vocab, n_layer=int(g.arch_key('block_count')), n_head=nh,
               n_kv_head=int(g.arch_key('attention.head_count_kv', nh)),
               d_mlp=g.shape('blk.0.ffn_up.weight')[0], eps=float(g.arch_key('attention.layer_norm_rms_epsilon', 1e-5)),
               theta=float(g.arch_key('rope.freq_base', 10000.0)))
    cfg['d_head'] = g.shape('blk.0.attn_q.weight')[0] // nh
    st = g.arch_key('rope.scaling.type')
    f = float(g.arch_key('rope.scaling.factor', 0.0) or 0.0)
    cfg['rope_scale'] = f if st in (None, 'linear') and f > 0 and f != 1 else 1.0
    if st not in (None, 'none', 'linear'):
        sys.exit(f'peer_dataset.py: {g.path}: rope.scaling.type {st!r} (none or linear are run here)')
    return cfg


NAMES = {'rms_att': 'blk.{}.attn_norm.weight', 'wq': 'blk.{}.attn_q.weight', 'wk': 'blk.{}.attn_k.weight',
         'wv': 'blk.{}.attn_v.weight', 'wo': 'blk.{}.attn_output.weight', 'rms_ffn': 'blk.{}.ffn_norm.weight',
         'w1': 'blk.{}.ffn_gate.weight', 'w3': 'blk.{}.ffn_up.weight', 'w2': 'blk.{}.ffn_down.weight'}


def load_weights(g, cfg):
    """(weights, how): the file's weights when every tensor needed is F32/F16/BF16,
    else random N(0, 0.02) of the same shapes (norm gains 1)."""
    import torch
    need = ['token_embd.weight'] + [n.format(l) for l in range(cfg['n_layer']) for n in NAMES.values()]
    bad = sorted({GGML_NAME.get(g.tensors[n][1], str(g.tensors[n][1])) for n in need if not g.readable(n)})
    rng = np.random.default_rng(1234)

    def get(name):
        if not bad:
            return torch.from_numpy(g.f32(name))
        s = g.shape(name)
        return torch.ones(s) if name.endswith('norm.weight') else torch.from_numpy(
            rng.normal(0, 0.02, size=s).astype(np.float32))
    w = {'emb': get('token_embd.weight')}
    for k, n in NAMES.items():
        w[k] = [get(n.format(l)) for l in range(cfg['n_layer'])]
    rf = None
    if 'rope_freqs.weight' in g.tensors:   # Llama 3's frequency factors (llama.cpp: theta_i / factor_i)
        rf = torch.from_numpy(g.f32('rope_freqs.weight').reshape(-1).astype(np.float64))
    return w, rf, ('file' if not bad else 'random (tensor types %s are not read here)' % ','.join(bad))


def rope_tables(T, cfg, rf):
    """cos, sin [T, 1, d_head/2] as mechprobe's runtime/pos.c: adjacent pairs, base
    rope.freq_base, frequencies divided by rope_freqs, positions by a linear scale."""
    import torch
    hs = cfg['d_head']
    i = torch.arange(0, hs, 2, dtype=torch.float64)
    inv = 1.0 / cfg['theta'] ** (i / hs)
    if rf is not None:
        inv = inv / rf
    ang = (torch.arange(T, dtype=torch.float64) / cfg['rope_scale'])[:, None] * inv[None, :]
    return torch.cos(ang).float()[:, None, :], torch.sin(ang).float()[:, None, :]


def build_model(cfg, w, rf, attn):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    sys.path.insert(0, HERE)
    import peer_torch

    class Block(nn.Module):
        """One Llama block; its output is hook_resid_post."""

        def __init__(self, l):
            super().__init__()
            self.l = l
            self.rope = None

        def forward(self, x):
            cos, sin = self.rope
            return peer_torch.block(cfg, w, self.l, x, cos, sin, attn, cfg['eps'])

    class Llama(nn.Module):
        """Embedding and blocks: a dataset of hook_resid_post needs no unembedding
        (mechprobe's capture without --logits computes none either)."""

        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block(l) for l in range(cfg['n_layer']))
            self.T = -1

        def forward(self, tok):
            T = tok.shape[1]
            if T != self.T:
                tabs = rope_tables(T, cfg, rf)
                for b in self.blocks:
                    b.rope = tabs
                self.T = T
            x = F.embedding(tok, w['emb'])
            for b in self.blocks:
                x = b(x)
            return x
    return Llama()


def read_tokens(path, vocab):
    rows = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                sys.exit(f'peer_dataset.py: {path}:{i}: empty line')
            try:
                ids = np.array([int(x) for x in line.split(',')], dtype=np.int64)
            except ValueError:
                sys.exit(f'peer_dataset.py: {path}:{i}: not comma-separated integers')
            if ids.min() < 0 or ids.max() >= vocab:
                sys.exit(f'peer_dataset.py: {path}:{i}: id outside the vocabulary 0..{vocab - 1}')
            rows.append(ids)
    if not rows:
        sys.exit(f'peer_dataset.py: {path}: no sequences')
    return rows


def cpu_probe():
    v = [int(x) for x in open('/proc/stat').readline().split()[1:9]]
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf('SC_CLK_TCK'), \
        ru.ru_utime + ru.ru_stime


def cmd_run(a):
    import h5py
    import torch
    sys.path.insert(0, HERE)
    from peer_torch import pick_attention
    torch.set_num_threads(a.threads)
    t_load = time.perf_counter()
    g = GGUF(a.model)
    cfg = llama_config(g)
    w, rf, how = load_weights(g, cfg)
    rows = read_tokens(a.tokens, cfg['vocab'])
    N, tmax = len(rows), max(len(r) for r in rows)
    try:
        ref = h5py.File(a.layout, 'r')
    except OSError as e:
        sys.exit(f'peer_dataset.py: --layout {a.layout}: {e}')
    if 'acts' not in ref:
        sys.exit(f'peer_dataset.py: --layout {a.layout}: no /acts group (not a mechprobe dataset capture)')
    layout = {}
    for name, ds in ref['acts'].items():
        m = re.fullmatch(r'blocks\.(\d+)\.hook_resid_post', name)
        if not m or int(m.group(1)) >= cfg['n_layer']:
            sys.exit(f'peer_dataset.py: --layout {a.layout}: /acts/{name} is not a hook_resid_post of this model')
        if ds.shape[2:] != (cfg['d_model'],):
            sys.exit(f'peer_dataset.py: --layout {a.layout}: /acts/{name} has rows {ds.shape[2:]}, '
                     f'the model d_model {cfg["d_model"]}')
        layout[int(m.group(1))] = (name, ds.dtype, ds.chunks, ds.fillvalue, ds.compression)
    ref.close()
    name, attn = pick_attention()
    model = build_model(cfg, w, rf, attn)
    load_s = time.perf_counter() - t_load

    probe = cpu_probe()
    t0 = time.perf_counter()
    f = h5py.File(a.out, 'w')
    f.create_dataset('lengths', data=np.array([len(r) for r in rows], dtype=np.int32))
    tokds = f.create_dataset('tokens', shape=(N, tmax), dtype=np.int32, chunks=(1, tmax), fillvalue=-1)
    acts = f.create_group('acts')
    dsets = {}
    for l, (nm, dt, ch, fill, comp) in layout.items():
        ch = (1, min(ch[1], tmax), cfg['d_model']) if ch else None
        dsets[l] = acts.create_dataset(nm, shape=(N, tmax, cfg['d_model']), dtype=dt, chunks=ch, fillvalue=fill,
                                       compression=comp)
    cur = [0]

    def hook_for(ds):
        def hook(module, inp, out):            # as TransformerLens users write hooks: copy out to the file
            ds[cur[0], :out.shape[1], :] = out[0].numpy()
        return hook
    handles = [model.blocks[l].register_forward_hook(hook_for(ds)) for l, ds in dsets.items()]
    with torch.inference_mode():
        for i, r in enumerate(rows):
            cur[0] = i
            tokds[i, :len(r)] = r
            model(torch.from_numpy(r).view(1, -1))
    for h in handles:
        h.remove()
    f.close()
    fd = os.open(a.out, os.O_RDONLY)          # durable on disk, as mechprobe's commit (fsync)
    os.fsync(fd)
    os.close(fd)
    dt = time.perf_counter() - t0
    b = cpu_probe()
    other = max(0.0, ((b[1] - probe[1]) - (b[2] - probe[2])) / (b[0] - probe[0]))
    print(f'torch={torch.__version__}\nthreads={torch.get_num_threads()}\nattention={name}\nweights={how}')
    print(f'sequences={N}\ntmax={tmax}\ntokens={sum(len(r) for r in rows)}\nlayers_written={len(dsets)}')
    print(f'load_s={load_s:.3f}\ncapture_s={dt:.3f}\ntok_s={sum(len(r) for r in rows) / dt:.1f}')
    print(f'bytes={os.path.getsize(a.out)}\nother_cores={other:.2f}')
    print(f'maxrss_mib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}')


def cmd_info(a):
    g = GGUF(a.model)
    cfg = llama_config(g)
    for k, v in cfg.items():
        print(f'{k}={v}')
    types = sorted({GGML_NAME.get(t, str(t)) for _, t, _ in g.tensors.values()})
    print(f'tensor_types={",".join(types)}')


def cmd_check(a):
    import h5py
    try:
        f = h5py.File(a.file, 'r')
    except OSError as e:
        sys.exit(f'peer_dataset.py: check {a.file}: {e}')
    errs = []
    lens = f['lengths'][:] if 'lengths' in f else None
    if lens is None or lens.shape != (a.n,):
        errs.append(f'/lengths {None if lens is None else lens.shape} (expected ({a.n},))')
    finite = True
    last = None
    for l in range(a.layers):
        nm = f'acts/blocks.{l}.hook_resid_post'
        if nm not in f:
            errs.append(f'/{nm} missing')
            continue
        ds = f[nm]
        if ds.shape != (a.n, a.tmax, a.d_model) or ds.dtype != np.float32:
            errs.append(f'/{nm} is {ds.shape} {ds.dtype} (expected ({a.n}, {a.tmax}, {a.d_model}) float32)')
            continue
        for i in sorted({0, a.n // 2, a.n - 1}):
            finite &= bool(np.isfinite(ds[i]).all())
        if l == a.layers - 1:
            last = ds[0]
    extra = sorted(set(f['acts']) - {f'blocks.{l}.hook_resid_post' for l in range(a.layers)}) if 'acts' in f else []
    if extra:
        errs.append('unexpected datasets ' + ','.join(extra))
    ds0 = f[f'acts/blocks.0.hook_resid_post'] if 'acts/blocks.0.hook_resid_post' in f else None
    if ds0 is not None:
        print(f'chunks={"x".join(map(str, ds0.chunks)) if ds0.chunks else "contiguous"}')
    print(f'shape_ok={0 if errs else 1}\nfinite={int(finite)}')
    for e in errs:
        print(f'error={e}')
    if last is not None and a.save:
        np.save(a.save, last)
    if last is not None and a.against:
        b = np.load(a.against)
        if b.shape != last.shape:
            print(f'rel_diff=nan\nerror=row 0 shapes {last.shape} and {b.shape} differ')
        else:
            print(f'rel_diff={float(np.abs(last - b).max() / max(np.abs(b).max(), 1e-30)):.3g}')
    sys.exit(1 if errs or not finite else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = ap.add_subparsers(dest='cmd', required=True)
    r = sub.add_parser('run')
    r.add_argument('model')
    r.add_argument('tokens')
    r.add_argument('out')
    r.add_argument('--layout', required=True)
    r.add_argument('--threads', type=int, default=os.cpu_count())
    i = sub.add_parser('info')
    i.add_argument('model')
    c = sub.add_parser('check')
    c.add_argument('file')
    for k in ('--n', '--tmax', '--layers', '--d-model'):
        c.add_argument(k, type=int, required=True)
    c.add_argument('--save')
    c.add_argument('--against')
    a = ap.parse_args()
    if a.cmd == 'run' and a.threads < 1:
        sys.exit('peer_dataset.py: --threads must be positive')
    {'run': cmd_run, 'info': cmd_info, 'check': cmd_check}[a.cmd](a)


if __name__ == '__main__':
    main()

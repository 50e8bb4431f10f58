#!/usr/bin/env python3
"""gguf_fixture.py — writes the independent test files gguf_fixture.gguf,
gguf_fixture_small.gguf (a fuzzing seed) and gguf_fixture.safetensors next to itself (numpy + struct + json only, no
mechprobe code): a GGUF *version 2* file with general.alignment = 64, metadata
of several value types, and tensors of every type mechprobe dequantises built
from random bytes, each followed by an F32 tensor NAME.expected holding the
values dequantised here in numpy from ggml's block layouts; and a safetensors
file with F32/F16/BF16 tensors and NAME.expected companions.

Usage: /usr/bin/python3 tests/data/gguf_fixture.py   (deterministic, seed 5)
"""
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(5)
ALIGN = 64

# ggml type id -> (name, values per block, bytes per block)
TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
         6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 12: ("Q4_K", 256, 144),
         14: ("Q6_K", 256, 210), 30: ("BF16", 1, 2)}


def half(a):
    """f16 little-endian bytes (uint8 pairs) -> float64."""
    return np.ascontiguousarray(a).view("<f2").astype(np.float64).reshape(-1)


def rand_halves(n, lo=-3.0, hi=3.0):
    return np.asarray(rng.uniform(lo, hi, n), dtype="<f2").view(np.uint8).reshape(n, 2)


def deq(tid, raw, n):
    name, bv, bb = TYPES[tid]
    if tid == 0:
        return np.frombuffer(raw, "<f4").astype(np.float64)
    if tid == 1:
        return np.frombuffer(raw, "<f2").astype(np.float64)
    if tid == 30:
        u = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64)
    b = np.frombuffer(raw, np.uint8).reshape(-1, bb)
    out = np.zeros((b.shape[0], bv))
    if tid in (2, 3):
        d = half(b[:, 0:2])
        m = half(b[:, 2:4]) if tid == 3 else np.zeros_like(d)
        qs = b[:, 4:20] if tid == 3 else b[:, 2:18]
        q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float64)
        return ((q - (8 if tid == 2 else 0)) * d[:, None] + m[:, None]).reshape(-1)
    if tid in (6, 7):
        d = half(b[:, 0:2])
        m = half(b[:, 2:4]) if tid == 7 else np.zeros_like(d)
        o = 4 if tid == 7 else 2
        qh = np.ascontiguousarray(b[:, o:o + 4]).view("<u4").reshape(-1).astype(np.uint64)
        qs = b[:, o + 4:o + 20].astype(np.uint64)
        bits = (qh[:, None] >> np.arange(32, dtype=np.uint64)[None, :]) & 1
        q = np.concatenate([qs & 15, qs >> 4], axis=1) | (bits << 4)
        return ((q.astype(np.float64) - (16 if tid == 6 else 0)) * d[:, None] + m[:, None]).reshape(-1)
    if tid == 8:
        d = half(b[:, 0:2])
        return (b[:, 2:34].view(np.int8).astype(np.float64) * d[:, None]).reshape(-1)
    if tid == 12:  # Q4_K: d, dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
        for i in range(b.shape[0]):
            d, dmin = half(b[i, 0:2])[0], half(b[i, 2:4])[0]
            s = b[i, 4:16].astype(int)
            sc, mn = [0] * 8, [0] * 8
            for j in range(8):
                if j < 4:
                    sc[j], mn[j] = s[j] & 63, s[j + 4] & 63
                else:
                    sc[j] = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4)
                    mn[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4)
            qs = b[i, 16:144].astype(int)
            for g in range(4):
                chunk = qs[32 * g:32 * g + 32]
                lo, hi = chunk & 15, chunk >> 4
                out[i, 64 * g:64 * g + 32] = np.float32(d * sc[2 * g]) * lo - np.float32(dmin * mn[2 * g])
                out[i, 64 * g + 32:64 * g + 64] = np.float32(d * sc[2 * g + 1]) * hi - np.float32(dmin * mn[2 * g + 1])
        return out.reshape(-1)
    if tid == 14:  # Q6_K: ql[128], qh[64], int8 scales[16], d
        for i in range(b.shape[0]):
            ql, qh = b[i, 0:128].astype(int), b[i, 128:192].astype(int)
            sc = b[i, 192:208].view(np.int8).astype(int)
            d = half(b[i, 208:210])[0]
            for k in range(256):
                h, r = divmod(k, 128)          # which half of 128, position inside it
                quarter, l = divmod(r, 32)     # 4 runs of 32 share the ql/qh bytes l
                lq = ql[64 * h + l + (32 if quarter in (1, 3) else 0)]
                low = (lq & 15) if quarter in (0, 1) else (lq >> 4)
                high = (qh[32 * h + l] >> (2 * quarter)) & 3
                q = (low | (high << 4)) - 32
                out[i, k] = d * sc[8 * h + r // 16] * q
        return out.reshape(-1)
    raise ValueError(name)


def random_blocks(tid, n_blocks):
    name, bv, bb = TYPES[tid]
    b = rng.integers(0, 256, size=(n_blocks, bb), dtype=np.uint8)
    if tid in (2, 6, 8):
        b[:, 0:2] = rand_halves(n_blocks)
    if tid in (3, 7):
        b[:, 0:2] = rand_halves(n_blocks)
        b[:, 2:4] = rand_halves(n_blocks)
    if tid == 12:
        b[:, 0:2] = rand_halves(n_blocks, 0.001, 0.1)
        b[:, 2:4] = rand_halves(n_blocks, 0.001, 0.1)
    if tid == 14:
        b[:, 208:210] = rand_halves(n_blocks, 0.0005, 0.05)
    return b.tobytes()


def gguf_str(s):
    s = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(s)) + s


def kv(key, vtype, payload):
    return gguf_str(key) + struct.pack("<I", vtype) + payload


def write_gguf(path):
    tensors = []  # (name, type, dims, raw)
    # shapes in PyTorch order: the last dimension is the row (ggml's dims[0])
    for tid, shape in [(2, (3, 64)), (3, (2, 32)), (6, (2, 64)), (7, (3, 32)), (8, (2, 96)),
                       (12, (2, 256)), (14, (1, 512)), (1, (3, 7)), (30, (4, 5)), (0, (2, 3, 3))]:
        name, bv, bb = TYPES[tid]
        n = int(np.prod(shape))
        if tid == 0:
            raw = rng.standard_normal(n).astype("<f4").tobytes()
        elif tid == 1:
            raw = np.concatenate([rng.standard_normal(n - 4), [65504.0, -0.0, 6e-8, 1e-5]]).astype("<f2").tobytes()
        elif tid == 30:
            raw = (rng.standard_normal(n).astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            raw = random_blocks(tid, n // bv)
        lname = name.lower()
        tensors.append((f"t.{lname}", tid, shape, raw))
        tensors.append((f"t.{lname}.expected", 0, shape, deq(tid, raw, n).astype("<f4").tobytes()))
    meta = [
        kv("general.architecture", 8, gguf_str("llama")),
        kv("general.alignment", 4, struct.pack("<I", ALIGN)),
        kv("test.u8", 0, struct.pack("<B", 200)),
        kv("test.i16", 3, struct.pack("<h", -12345)),
        kv("test.u64", 10, struct.pack("<Q", 2**63 + 7)),
        kv("test.f64", 12, struct.pack("<d", 3.141592653589793)),
        kv("test.f32", 6, struct.pack("<f", 0.1)),
        kv("test.bool", 7, struct.pack("<B", 1)),
        kv("test.str", 8, gguf_str("h\u00e9llo \u2603")),
        kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 4) + b"".join(gguf_str(s) for s in ["<unk>", "a", "\u0120b", ""])),
        kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 4) + struct.pack("<4f", 0.0, -1.5, -2.25, 1e-3)),
        kv("test.nested", 9, struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 5, 2) + struct.pack("<2i", -1, 2)
           + struct.pack("<IQ", 8, 1) + gguf_str("x")),
    ]
    body = b"GGUF" + struct.pack("<IQQ", 2, len(tensors), len(meta)) + b"".join(meta)
    off = 0
    infos, data = b"", b""
    for name, tid, shape, raw in tensors:
        dims = list(reversed(shape))  # ggml order: fastest first
        infos += gguf_str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", tid, off)
        data += raw + b"\0" * ((-len(raw)) % ALIGN)
        off = len(data)
    body += infos
    body += b"\0" * ((-len(body)) % ALIGN)
    with open(path, "wb") as f:
        f.write(body + data)


def write_small_gguf(path):
    """A small v3 file (default alignment 32) that fuzzing seeds mutate densely."""
    meta = [kv("general.architecture", 8, gguf_str("gpt2")),
            kv("gpt2.context_length", 4, struct.pack("<I", 64)),
            kv("tokenizer.ggml.merges", 9, struct.pack("<IQ", 8, 2) + gguf_str("a b") + gguf_str("ab c")),
            kv("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, 3) + struct.pack("<3i", 1, 1, 3))]
    tensors = [("w", 8, (1, 32), random_blocks(8, 1)), ("k", 12, (1, 256), random_blocks(12, 1)),
               ("b", 0, (2,), struct.pack("<2f", 0.5, -1.0))]
    body = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta)
    data = b""
    for name, tid, shape, raw in tensors:
        dims = list(reversed(shape))
        body += gguf_str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        body += struct.pack("<IQ", tid, len(data))
        data += raw + b"\0" * ((-len(raw)) % 32)
    body += b"\0" * ((-len(body)) % 32)
    with open(path, "wb") as f:
        f.write(body + data)


def write_safetensors(path):
    entries, blobs, off = {}, [], 0

    def add(name, dtype, shape, raw):
        nonlocal off
        entries[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)

    for name, dtype, shape in [("a.f32", "F32", (2, 3)), ("b.f16", "F16", (4, 5)), ("c.bf16", "BF16", (3, 7)),
                               ("d.scalar", "F32", ())]:
        n = int(np.prod(shape))
        x = rng.standard_normal(n)
        if dtype == "F32":
            raw, exp = x.astype("<f4").tobytes(), x.astype(np.float32)
        elif dtype == "F16":
            h = x.astype("<f2")
            raw, exp = h.tobytes(), h.astype(np.float32)
        else:
            u = (x.astype("<f4").view("<u4") >> 16).astype("<u2")
            raw, exp = u.tobytes(), (u.astype(np.uint32) << 16).view(np.float32)
        add(name, dtype, shape, raw)
        add(name + ".expected", "F32", shape, exp.astype("<f4").tobytes())
    add("e.i64", "I64", (2,), struct.pack("<2q", 1, -2))
    entries["__metadata__"] = {"format": "pt", "source": "gguf_fixture.py"}
    header = json.dumps(entries).encode()
    header += b" " * ((-len(header)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + b"".join(blobs))


if __name__ == "__main__":
    write_gguf(os.path.join(HERE, "gguf_fixture.gguf"))
    write_safetensors(os.path.join(HERE, "gguf_fixture.safetensors"))
    write_small_gguf(os.path.join(HERE, "gguf_fixture_small.gguf"))

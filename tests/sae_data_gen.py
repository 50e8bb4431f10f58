"""tests/sae_data_gen.py — writes the h5py files test_sae_data.c reads
(io/sae_data.c against an independent writer): a dataset capture with
/lengths (rows past each length padded, to be skipped), a plain [B, T, D]
capture, the expected real rows in order as raw float32, and a file whose D
differs."""
import os
import sys

import h5py
import numpy as np

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(3)
hook = "blocks.0.hook_resid_post"
a = rng.standard_normal((3, 5, 4)).astype(np.float32)
lengths = np.array([5, 2, 4], dtype=np.int32)
for b, n in enumerate(lengths):
    a[b, n:] = 0.0
b_ = rng.standard_normal((2, 3, 4)).astype(np.float32)
with h5py.File(os.path.join(out, "a.h5"), "w") as f:
    f["acts/" + hook] = a
    f["lengths"] = lengths
    f["tokens"] = np.zeros((3, 5), dtype=np.int32)
with h5py.File(os.path.join(out, "b.h5"), "w") as f:
    f.create_dataset("acts/" + hook, data=b_, chunks=(1, 3, 4), compression="gzip")
with h5py.File(os.path.join(out, "c.h5"), "w") as f:
    f["acts/" + hook] = np.zeros((1, 2, 5), dtype=np.float32)
rows = [a[i, :n] for i, n in enumerate(lengths)] + [b_.reshape(-1, 4)]
np.concatenate(rows).astype("<f4").tofile(os.path.join(out, "expected.f32"))

"""bench/sae_train.py — SAE training throughput (tokens/s): mechprobe's C
trainer (mp.sae.train, streaming the rows from an HDF5 capture through its
shuffle buffer) against a plain PyTorch loop with SAELens's semantics (the
same initialisation, MSE + decoder-norm weighted L1 / TopK + AuxK, grad-norm
clipping at 1, torch.optim.Adam), same architecture, data, batch and threads,
side by side in one run. Run through bench/sae_train.sh.

  /usr/bin/python3 bench/sae_train.py --mechprobe build/mechprobe
      [--d-in 512] [--d-sae 4096] [--batch 4096] [--k 32] [--steps 6]
      [--archs standard,topk] [--stream-gb G]   (opt-in: a dataset of G GB,
      larger than memory if you like, streamed once by mechprobe alone)
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import torch

HOOK = "blocks.0.hook_resid_post"


def make_data(path, rows, d_in, seq=256, seed=0):
    """Rows of sparse combinations of random unit directions plus noise (the
    features an SAE should find), written as /acts/<hook> [rows/seq, seq, d_in]."""
    rng = np.random.default_rng(seed)
    n_dir = 4 * d_in
    dirs = rng.standard_normal((n_dir, d_in)).astype(np.float32)
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("acts/" + HOOK, shape=(rows // seq, seq, d_in), dtype="f4",
                              chunks=(1, seq, d_in))
        block = 64
        for b0 in range(0, rows // seq, block):
            nb = min(block, rows // seq - b0)
            n = nb * seq
            idx = rng.integers(0, n_dir, size=(n, 8))
            coef = rng.uniform(0.5, 2.0, size=(n, 8)).astype(np.float32)
            x = np.einsum("nk,nkd->nd", coef, dirs[idx]) + 0.05 * rng.standard_normal((n, d_in)).astype(np.float32)
            ds[b0:b0 + nb] = x.reshape(nb, seq, d_in)


class TorchSAE(torch.nn.Module):
    def __init__(self, arch, d_in, d_sae, k):
        super().__init__()
        self.arch, self.k = arch, k
        w_dec = torch.empty(d_sae, d_in)
        torch.nn.init.kaiming_uniform_(w_dec)
        w_dec = w_dec / w_dec.norm(dim=-1, keepdim=True) * 0.1
        self.W_dec = torch.nn.Parameter(w_dec)
        self.W_enc = torch.nn.Parameter(w_dec.T.clone().contiguous())
        self.b_enc = torch.nn.Parameter(torch.zeros(d_sae))
        self.b_dec = torch.nn.Parameter(torch.zeros(d_in))

    def loss(self, x, dead, l1):
        pre = (x - self.b_dec) @ self.W_enc + self.b_enc
        if self.arch == "topk":
            top = torch.topk(pre, self.k, dim=-1)
            acts = torch.zeros_like(pre).scatter_(-1, top.indices, torch.relu(top.values))
        else:
            acts = torch.relu(pre)
        out = acts @ self.W_dec + self.b_dec
        loss = (out - x).pow(2).sum(-1).mean()
        if self.arch == "standard":
            loss = loss + (l1 * (acts * self.W_dec.norm(dim=1)).norm(p=1, dim=-1)).mean()
        elif dead is not None and int(dead.sum()) > 0:
            n_dead = int(dead.sum())
            k_aux = min(x.shape[-1] // 2, n_dead)
            scale = min(n_dead / (x.shape[-1] // 2), 1.0)
            lat = torch.where(dead[None], pre, torch.tensor(-float("inf")))
            t = lat.topk(k_aux, sorted=False)
            aux_acts = torch.zeros_like(pre).scatter_(-1, t.indices, t.values)
            rec = aux_acts @ self.W_dec + self.b_dec
            loss = loss + scale * (rec - (x - out).detach()).pow(2).sum(-1).mean()
        return loss, acts


def torch_run(arch, rows, a):
    torch.manual_seed(0)
    sae = TorchSAE(arch, a.d_in, a.d_sae, a.k)
    opt = torch.optim.Adam(sae.parameters(), lr=3e-4, betas=(0.9, 0.999))
    since = torch.zeros(a.d_sae)
    n = rows.shape[0]
    times = []
    for step in range(a.steps + 1):  # step 0 pays the first touch of every buffer: not timed
        i0 = (step * a.batch) % (n - a.batch + 1)
        x = rows[i0:i0 + a.batch]
        t0 = time.perf_counter()
        loss, acts = sae.loss(x, since > 1000, 1.0)
        with torch.no_grad():
            fired = (acts > 0).sum(0) > 0
            since += 1
            since[fired] = 0
        loss.backward()
        torch.nn.utils.clip_grad_norm_(sae.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        if step > 0:
            times.append(time.perf_counter() - t0)
    return a.batch * len(times) / sum(times), float(loss)


def mp_run(arch, path, a, steps, extra=""):
    lua = f"""
local sae, r = mp.sae.train{{architecture = "{arch}", d_sae = {a.d_sae}, k = {a.k if arch == 'topk' else 'nil'},
  dataset = "{path}", hook = "{HOOK}", batch_size = {a.batch}, steps = {steps}, lr = 3e-4, seed = 1,
  shuffle_buffer = {2 * a.batch}{extra}}}
print(string.format("tokens_per_second=%.6g loss=%.6g seconds=%.6g steps=%d", r.steady_tokens_per_second,
  r.mse_loss + (r.l1_loss or r.auxiliary_reconstruction_loss), r.seconds, r.steps))
"""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(lua)
    try:
        out = subprocess.run([a.mechprobe, f.name], check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    kv = dict(t.split("=") for t in out.split())
    return float(kv["tokens_per_second"]), float(kv["loss"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mechprobe", required=True)
    ap.add_argument("--d-in", type=int, default=512)
    ap.add_argument("--d-sae", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--archs", default="standard,topk")
    ap.add_argument("--stream-gb", type=float, default=0.0)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    tmp = tempfile.mkdtemp(prefix="mpsae.")
    path = os.path.join(tmp, "acts.h5")
    rows_n = (a.steps + 2) * a.batch
    rows_n = (rows_n + 255) // 256 * 256
    make_data(path, rows_n, a.d_in)
    with h5py.File(path) as f:
        rows = torch.from_numpy(f["acts/" + HOOK][:].reshape(-1, a.d_in))
    print(f"SAE training, d_in {a.d_in}, d_sae {a.d_sae}, batch {a.batch}, {a.steps} timed steps, "
          f"threads {torch.get_num_threads()} (torch {torch.__version__})")
    print(f"{'arch':10s} {'PyTorch tok/s':>14s} {'mechprobe tok/s':>16s} {'ratio':>7s}")
    for arch in a.archs.split(","):
        t_tps, _ = torch_run(arch, rows, a)
        m_tps, _ = mp_run(arch, path, a, a.steps + 1)  # its first step is not timed either
        print(f"{arch:10s} {t_tps:14.4g} {m_tps:16.4g} {m_tps / t_tps:6.2f}x", flush=True)
    os.unlink(path)
    if a.stream_gb > 0:
        big = os.path.join(tmp, "big.h5")
        n = int(a.stream_gb * 2**30 / (4 * a.d_in)) // 256 * 256
        make_data(big, n, a.d_in, seed=1)
        steps = n // a.batch
        tps, loss = mp_run("topk", big, a, steps, ", epochs = 1, progress = true")
        print(f"streamed {a.stream_gb} GB ({n} rows) once: topk {tps:.4g} tok/s, final loss {loss:.4g}")
        os.unlink(big)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()

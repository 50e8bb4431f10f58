#!/usr/bin/python3
"""peer_analyze.py — the numpy/matplotlib peer of bench_analyze: the same work on
a cloud of the same distribution and size, then both timings side by side.

usage: peer_analyze.py [--bench PATH/bench_analyze] [--n 1000000] [--d 64] [--k 8]
                       [--points 100000] [--reps 3] [--seed 1] [--out DIR]

It runs bench_analyze (default: build/bench/bench_analyze) with the same options,
reads its key=value lines, then times, on x_ij = z_ij / (1 + j/4) + 0.5:
  PCA, covariance path (what mechprobe does for large n): mean, Xc^T Xc / (n-1) in
      float64, np.linalg.eigh, top-k components, projections (Xc @ V_k in float32);
  PCA, SVD path (what sklearn does): np.linalg.svd(Xc, full_matrices=False), float32;
  stable rank: ||X||_F^2 / lambda_max(X^T X) with the Gram matrix in float64 + eigvalsh;
  scatter: matplotlib (Agg) figure of the same size and dpi, 100k points coloured by
      value with viridis and a colorbar, marker diameter 3 pt (s = 9), alpha 0.8,
      savefig to PNG.
Timings are medians over --reps. Ratio = peer / mechprobe (> 1: mechprobe faster).
Also prints the leading explained-variance ratio from both, so we know both did
the same computation (they agree to sampling noise, ~1e-3).
Needs Debian's python3-numpy and python3-matplotlib (/usr/bin/python3).
"""
import argparse, os, statistics, subprocess, sys, time
import numpy as np
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def timed(fn, reps):
    ts, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bench", default=os.path.join(here, "..", "build", "bench", "bench_analyze"))
    ap.add_argument("--n", type=int, default=1000000)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--points", type=int, default=100000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="/tmp")
    ap.add_argument("--width", type=float, default=432)
    ap.add_argument("--height", type=float, default=324)
    ap.add_argument("--dpi", type=float, default=150)
    a = ap.parse_args()

    cmd = [a.bench, "--n", str(a.n), "--d", str(a.d), "--k", str(a.k), "--points", str(a.points),
           "--reps", str(a.reps), "--seed", str(a.seed), "--out", a.out,
           "--width", str(a.width), "--height", str(a.height), "--dpi", str(a.dpi)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("bench_analyze failed: " + res.stderr)
    mp = dict(line.split("=", 1) for line in res.stdout.split())

    rng = np.random.default_rng(a.seed)
    scale = (1.0 / (1.0 + np.arange(a.d) / 4.0)).astype(np.float32)
    X = rng.standard_normal((a.n, a.d), dtype=np.float32) * scale + np.float32(0.5)

    def pca_cov():
        mean = X.mean(axis=0, dtype=np.float64)
        Xc = X.astype(np.float64) - mean
        C = Xc.T @ Xc / (a.n - 1)
        w, V = np.linalg.eigh(C)
        order = np.argsort(w)[::-1][:a.k]
        comps = V[:, order].T.astype(np.float32)
        proj = (X - mean.astype(np.float32)) @ comps.T
        return w[order] / w.sum(), proj

    def pca_svd():
        Xc = X - X.mean(axis=0)
        U, S, Vt = np.linalg.svd(Xc, full_matrices=False)
        proj = U[:, :a.k] * S[:a.k]
        return (S[:a.k] ** 2) / (S ** 2).sum(), proj

    def srank():
        G = X.T.astype(np.float64) @ X.astype(np.float64)
        return np.trace(G) / np.linalg.eigvalsh(G)[-1]

    px = X[np.arange(a.points) % a.n]
    png = os.path.join(a.out, "peer_scatter.png")

    def scatter():
        fig = plt.figure(figsize=(a.width / 72, a.height / 72), dpi=a.dpi)
        ax = fig.add_subplot(1, 1, 1)
        sc = ax.scatter(px[:, 0], px[:, 1], c=px[:, min(2, a.d - 1)], s=9, cmap="viridis", alpha=0.8, linewidths=0)
        fig.colorbar(sc, ax=ax)
        fig.savefig(png, dpi=a.dpi)
        plt.close(fig)

    t_cov, (ratio_cov, _) = timed(pca_cov, a.reps)
    t_svd, (ratio_svd, _) = timed(pca_svd, a.reps)
    t_sr, sr = timed(srank, a.reps)
    t_sc, _ = timed(scatter, a.reps)

    rows = [
        ("PCA %dx%d, k=%d + proj" % (a.n, a.d, a.k), float(mp["pca_s"]), t_cov, "numpy cov (f64) + eigh"),
        ("PCA %dx%d, k=%d + proj" % (a.n, a.d, a.k), float(mp["pca_s"]), t_svd, "numpy svd (f32)"),
        ("stable rank %dx%d" % (a.n, a.d), float(mp["srank_s"]), t_sr, "numpy gram (f64) + eigvalsh"),
        ("scatter %d pts -> PNG" % a.points, float(mp["scatter_s"]), t_sc, "matplotlib Agg"),
    ]
    print("threads: mechprobe %s (OpenMP), numpy/matplotlib default" % mp.get("threads", "?"))
    print("%-34s %12s %12s %8s  %s" % ("task", "mechprobe s", "peer s", "ratio", "peer"))
    for name, m, p, how in rows:
        print("%-34s %12.4f %12.4f %8.2f  %s" % (name, m, p, p / m, how))
    print("check: explained-variance ratio of PC1: mechprobe %s (%s path), numpy cov %.6f, numpy svd %.6f"
          % (mp["pca_ratio1"], mp["pca_method"], ratio_cov[0], ratio_svd[0]))
    print("check: stable rank: mechprobe %s, numpy %.6f" % (mp["srank"], sr))
    print("figures: %s (mechprobe), %s (matplotlib)" % (mp["scatter_png"], png))


if __name__ == "__main__":
    main()

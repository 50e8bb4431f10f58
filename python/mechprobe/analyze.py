"""mechprobe.analyze: the analyses of the C core (analyze/*.h) on numpy
arrays, the functions of mp.analyze in Lua. Point clouds are arrays whose last
dim is the dimension d, their leading dims flattened into points ([n, d],
[B, T, d], ...). Indices in the results are 0-based (Lua's are 1-based).

    pca(X, k=None, proj=True)      -> {components [k, d], explained [k], ratio [k], mean [d],
                                       proj [n, k], total_var, method, n, d, k}
    stable_rank(X), sigma1_share(X) -> float (uncentred)
    spectrum(X)                     -> {fro2, sigma1, stable_rank, sigma1_share}
    separation(A, B, ridge=1e-4)    -> {cos, centroid_dist, spread, dist_over_spread,
                                        fisher_j, fisher_acc, ridge}
    sinks(pattern, eps=0.3, bins=0) -> {alpha, alpha0, entropy, sink_rate, sink_heads, pairs, eps,
                                        first_by_pos, bin_start, bin_end (queries [start, end))}
    entropy(pattern)                -> [..., T] nats
    key_norm_ratio(k)               -> float
    max_qk(q, k, causal=True)       -> (max [T], argmax [T])
    massive(h, abs=100, rel=1000, max_hits=100000) -> {ratio [L, T], median [L], hits, n_hits_total}
    bootstrap(values, n=1000, level=0.95, seed=1, stat="mean") -> {estimate, lo, hi, se, n}
    probe(X, y, kind="linear", ridge=0, standardize=True, max_iter=100, tol=1e-8) -> Probe
"""
from . import _core

pca = _core.analyze_pca
stable_rank = _core.analyze_stable_rank
sigma1_share = _core.analyze_sigma1_share
spectrum = _core.analyze_spectrum
separation = _core.analyze_separation
sinks = _core.analyze_sinks
entropy = _core.analyze_entropy
key_norm_ratio = _core.analyze_key_norm_ratio
max_qk = _core.analyze_max_qk
massive = _core.analyze_massive
bootstrap = _core.analyze_bootstrap


class Probe:
    """A fitted linear probe (analyze/probe.h): kind, d, w (float64 [d], raw
    feature units), b, loss, train_acc, r2, iterations, converged, rank."""

    def __init__(self, fit):
        self.__dict__.update(fit)

    def predict(self, X):
        """Scores [n] (float64): w.x + b, or the probability for a logistic probe."""
        return _core.analyze_probe_scores(self.kind, self.w, self.b, X)

    def accuracy(self, X, y):
        """Share of (score > 0.5) == (y > 0.5)."""
        import numpy as np
        s = self.predict(X)
        y = np.asarray(y, dtype=np.float64).ravel()
        if y.size != s.size:
            raise ValueError(f"analyze.Probe.accuracy: y has {y.size} labels for {s.size} rows of X")
        return float(np.mean((s > 0.5) == (y > 0.5)))

    def __repr__(self):
        return f"<mechprobe.analyze.Probe {self.kind} d={self.d} loss={self.loss:.6g} train_acc={self.train_acc:.4g}>"


def probe(X, y, kind="linear", ridge=0.0, standardize=True, max_iter=100, tol=1e-8):
    """Fits a linear ("linear": ridge least squares) or logistic probe of y [n]
    on X [n, d] (mp.analyze.probe)."""
    return Probe(_core.analyze_probe_fit(X, y, kind, ridge, standardize, max_iter, tol))


__all__ = ["pca", "stable_rank", "sigma1_share", "spectrum", "separation", "sinks", "entropy", "key_norm_ratio",
           "max_qk", "massive", "bootstrap", "probe", "Probe"]

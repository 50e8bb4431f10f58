"""mechprobe.load with TransformerLens's weight-processing keywords, the
interventions' namespace (mechprobe.ablate.zero / .mean) and a token-stream
training task: the pure-Python parts of the Model's API beyond hooks (the
rest is C, mechprobe._core, python/mpy_extra.c)."""
import types

import numpy as np

from . import _core

_PROCESS_KEYS = ("fold_ln", "center_writing_weights", "center_unembed", "fold_value_biases")


def load(path, tokenizer=None, *, copy=False, fold_ln=False, center_writing_weights=False, center_unembed=False,
         fold_value_biases=False):
    """load(path, tokenizer=None, copy=False, fold_ln=False, center_writing_weights=False,
    center_unembed=False, fold_value_biases=False) -> Model

    copy=True copies a llama2.c file's weights (otherwise its read-only
    memory map: m.param reads, m.set_param / m.set_weight refuse) into the
    model's own memory, so that they can be written (mp.load's copy = true).

    Every format mp.load reads (llama2.c, GGUF, Hugging Face folder, mechprobe
    checkpoint; a checkpoint's optimizer state and loss curve come with it, so
    m.train continues it). The weight-processing keywords are mp.load's
    (MP_LUA_LOAD_PROCESS_KEYS): each True one is applied with
    m.process_weights and must apply to this model (else ValueError, the
    model freed)."""
    m = _core.load(path, tokenizer, copy=bool(copy))
    try:
        _core._restore_train_state(m, path)
        asked = dict(zip(_PROCESS_KEYS, (fold_ln, center_writing_weights, center_unembed, fold_value_biases)))
        if any(asked.values()):
            try:
                m.process_weights(**{k: bool(v) for k, v in asked.items()})
            except ValueError as e:
                raise ValueError(f"load: {path}: {e}") from None
    except BaseException:
        m.close()
        raise
    return m


ablate = types.SimpleNamespace(zero=_core.ablate_zero, mean=_core.ablate_mean)
ablate.__doc__ = "Ablations: ablate.zero(head=None, positions=None), ablate.mean(reference, head=None, positions=None)"

Intervention = type(_core.scale(1.0))


class TokenStream:
    """A training task over one long token sequence (a 1-D integer array): each
    sample(B, T) draws B windows of T + 1 tokens at random offsets (numpy's
    default_rng(seed)) and returns (inputs [B, T], next tokens [B, T]), the
    shape m.train asks of a task."""

    def __init__(self, tokens, seed=0, eval_tokens=None):
        self.tokens = np.ascontiguousarray(np.asarray(tokens, dtype=np.int64).ravel())
        if self.tokens.size < 2:
            raise ValueError("TokenStream: tokens: need at least 2 tokens")
        self.eval_tokens = None if eval_tokens is None else np.asarray(eval_tokens, dtype=np.int64).ravel()
        self.rng = np.random.default_rng(seed)

    @staticmethod
    def _windows(src, rng, B, T):
        T = min(T, src.size - 1)
        start = rng.integers(0, src.size - T, size=B)
        idx = start[:, None] + np.arange(T + 1)[None, :]
        w = src[idx]
        return w[:, :-1], w[:, 1:]

    def sample(self, B, T):
        return self._windows(self.tokens, self.rng, B, T)

    def eval_sample(self, B, T):
        src = self.tokens if self.eval_tokens is None else self.eval_tokens
        return self._windows(src, self.rng, B, T)

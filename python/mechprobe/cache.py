"""The activation cache m.run_with_cache returns: a dict of hook name ->
float32 numpy array (the shapes of the Lua cache and DESIGN.md), with
TransformerLens's ActivationCache helpers. The arithmetic is the C core's
(runtime/act_cache.c, through the Model's _cache_* methods), the same
functions the Lua cache's helpers call (lua/lcache.c); this file gathers the
cached arrays as lcache.c does, so both give the same bits.

Stacks are [C, B, T, D] (C components), or [C, B, D] with pos_slice (one
position, 0-based, negative from the end).
"""
import numpy as np

from . import _core

__all__ = ["ActivationCache"]

_ATTN = {"q", "k", "v", "z", "rot_q", "rot_k", "attn_scores", "pattern", "result", "q_input", "k_input", "v_input"}
_MLP = {"pre", "post", "pre_linear"}


class ActivationCache(dict):
    """dict of hook name -> numpy array, plus:

    cache.model, cache.batch, cache.n_pos   the model and the run's B, T
    cache.loss                              the metric's value with loss=, else None
    cache["pattern", 0]                     TransformerLens's short names
                                            (utils.get_act_name): "blocks.0.attn.hook_pattern"
    accumulated_resid, decompose_resid, stack_head_results, stack_activation,
    apply_ln_to_stack, logit_attrs          TransformerLens's helpers
    """

    def __init__(self, data, model, batch, n_pos):
        super().__init__(data)
        self.model = model
        self.batch = batch
        self.n_pos = n_pos
        self.loss = None

    # ---- names ----
    def _key(self, key):
        if not isinstance(key, tuple):
            return key
        name, layer, sub = (tuple(key) + (None, None))[:3]
        if layer is not None and layer < 0:
            layer += self._cfg()["n_layer"]
        if sub is not None:
            return f"blocks.{layer}.{sub}.hook_{name}" if layer is not None else f"{sub}.hook_{name}"
        if layer is None:
            return f"hook_{name}"
        if name in _ATTN:
            return f"blocks.{layer}.attn.hook_{name}"
        if name in _MLP:
            return f"blocks.{layer}.mlp.hook_{name}"
        return f"blocks.{layer}.hook_{name}"

    def __getitem__(self, key):
        return super().__getitem__(self._key(key))

    def __contains__(self, key):
        return super().__contains__(self._key(key))

    def __missing__(self, key):
        if isinstance(key, str) and key.endswith("_grad"):
            how = (f"run m.run_with_cache(tokens, names=..., incl_bwd=True, loss=...) with names that include "
                   f"{key[:-5]!r} (a point with a gradient)")
        else:
            how = "run m.run_with_cache(tokens, names=...) with names that include it (m.hook_names() lists them)"
        names = [k for k in self if isinstance(k, str)]
        if not names:
            got = "the cache is empty"
        elif len(names) <= 8:
            got = "it captured " + ", ".join(names)
        else:  # the nearest by edit distance, as the Lua cache's error
            near = _core.nearest_names(str(key), names, 3)
            got = f"it captured {len(names)} names, the nearest {', '.join(near)}"
        raise KeyError(f"the cache has no {key!r}: {got}; {how}")

    def __repr__(self):
        return f"ActivationCache({len(self)} hook points: {', '.join(list(self)[:4])}{', ...' if len(self) > 4 else ''})"

    # ---- helpers' plumbing ----
    def _cfg(self):
        return self.model.config

    def _need(self, fn, name, per_row):
        if not dict.__contains__(self, name):
            raise KeyError(f"{fn}: the cache has no {name!r} (run m.run_with_cache with names that include it)")
        a = dict.__getitem__(self, name)
        if a.size != self.batch * self.n_pos * per_row:
            raise ValueError(f"{fn}: cache[{name!r}] has {a.size} values, expected {self.batch * self.n_pos * per_row}")
        return a.reshape(self.batch, self.n_pos, per_row)

    def _layer(self, layer, fn):
        nl = self._cfg()["n_layer"]
        if layer is None or layer == -1:
            return nl
        if not isinstance(layer, (int, np.integer)) or not -1 <= layer <= nl:
            raise ValueError(f"{fn}: layer must be -1..{nl} or None, got {layer!r}")
        return int(layer)

    def _pos(self, pos_slice, fn):
        T = self.n_pos
        if pos_slice is None:
            return -1
        if not isinstance(pos_slice, (int, np.integer)) or not -T <= pos_slice < T:
            raise ValueError(f"{fn}: pos_slice must be one position in {-T}..{T - 1} (or None for all), got "
                             f"{pos_slice!r}")
        return int(pos_slice) + T if pos_slice < 0 else int(pos_slice)

    def _scale(self, fn, layer, mlp_input):
        cfg = self._cfg()
        if layer >= cfg["n_layer"]:
            name = "ln_final.hook_scale"
        elif not cfg.get("pre_norms", True):
            raise ValueError(f"{fn}: the model's blocks have no pre-norms (pre_norms = false, OLMo 2): no norm reads "
                             f"block {layer}'s input; apply_ln works at the final layer only (ln_final)")
        else:
            name = f"blocks.{layer}.{'ln2' if mlp_input else 'ln1'}.hook_scale"
        return self._need(fn, name, 1)[:, :, 0]

    def _apply_ln(self, fn, stack, layer, mlp_input, p):
        """stack [C, B, Tn, D] or [C, B, D] (position p) normalized in place by the
        cached scale of the norm reading block `layer`'s input (lcache.c's apply_ln)."""
        sc = self._scale(fn, layer, mlp_input)
        s = np.ascontiguousarray(sc if p < 0 else sc[:, p:p + 1], dtype=np.float32).reshape(-1)
        D = self._cfg()["d_model"]
        self.model._cache_apply_ln(stack.reshape(stack.shape[0], -1, D), s)
        return stack

    def _stack(self, fn, comps, p, ln_layer, mlp_input, return_labels):
        D = self._cfg()["d_model"]
        parts = []
        for src, minus, _ in comps:
            x = self._need(fn, src, D)
            if minus is not None:
                x = x - self._need(fn, minus, D)
            parts.append(x if p < 0 else x[:, p])
        B, T = self.batch, self.n_pos
        shape = (len(parts), B, T, D) if p < 0 else (len(parts), B, D)
        out = np.empty(shape, dtype=np.float32)
        for i, x in enumerate(parts):
            out[i] = x
        if ln_layer >= 0:
            self._apply_ln(fn, out, ln_layer, mlp_input, p)
        if return_labels:
            return out, [lab for _, _, lab in comps]
        return out

    # ---- TransformerLens's helpers ----
    def accumulated_resid(self, layer=None, incl_mid=False, apply_ln=False, pos_slice=None, mlp_input=False,
                          return_labels=False):
        """The residual stream entering each block up to `layer` (None/-1: and the final
        residual): [C, B, T, D]; incl_mid adds each block's resid_mid; mlp_input
        ends with block `layer`'s resid_mid (the MLP's input)."""
        fn = "accumulated_resid"
        nl = self._cfg()["n_layer"]
        layer = self._layer(layer, fn)
        p = self._pos(pos_slice, fn)
        if mlp_input and layer >= nl:
            raise ValueError(f"{fn}: mlp_input needs a block's layer (0..{nl - 1})")
        comps = []
        for l in range(layer + 1):
            if l == nl:
                comps.append((f"blocks.{nl - 1}.hook_resid_post", None, "final_post"))
                break
            comps.append((f"blocks.{l}.hook_resid_pre", None, f"{l}_pre"))
            if (incl_mid and l < layer) or (mlp_input and l == layer):
                comps.append((f"blocks.{l}.hook_resid_mid", None, f"{l}_mid"))
        return self._stack(fn, comps, p, layer if apply_ln else -1, mlp_input, return_labels)

    def decompose_resid(self, layer=None, mlp_input=False, mode="all", apply_ln=False, pos_slice=None,
                        incl_embeds=True, return_labels=False):
        """The residual stream at `layer` as the sum of its parts: the embeddings, each
        block's hook_attn_out and hook_mlp_out ("mode": "all", "attn" or "mlp")."""
        fn = "decompose_resid"
        cfg = self._cfg()
        nl = cfg["n_layer"]
        layer = self._layer(layer, fn)
        p = self._pos(pos_slice, fn)
        if mode not in ("all", "mlp", "attn"):
            raise ValueError(f"{fn}: mode must be 'all', 'mlp' or 'attn', got {mode!r}")
        if mlp_input and layer >= nl:
            raise ValueError(f"{fn}: mlp_input needs a block's layer (0..{nl - 1})")
        comps = []
        if incl_embeds:
            if cfg["pos"] == "learned":  # hook_embed holds token + position embeddings
                comps.append(("hook_embed", "hook_pos_embed", "embed"))
                comps.append(("hook_pos_embed", None, "pos_embed"))
            else:
                comps.append(("hook_embed", None, "embed"))
        has_mlp = cfg["mlp"] != "none"
        for l in range(layer + (1 if mlp_input else 0)):
            if mode != "mlp":
                comps.append((f"blocks.{l}.hook_attn_out", None, f"{l}_attn_out"))
            if mode != "attn" and l < layer and has_mlp:
                comps.append((f"blocks.{l}.hook_mlp_out", None, f"{l}_mlp_out"))
        if not comps:
            raise ValueError(f"{fn}: no components (layer {layer}, these options)")
        return self._stack(fn, comps, p, layer if apply_ln else -1, mlp_input, return_labels)

    def stack_head_results(self, layer=None, return_labels=False, apply_ln=False, pos_slice=None):
        """Each head's output (blocks 0..layer-1; None: all) in d_model, without b_O:
        [layer * H, B, T, D], from attn.hook_result when cached, else hook_z and W_O."""
        fn = "stack_head_results"
        cfg = self._cfg()
        nl, D, H, Dh = cfg["n_layer"], cfg["d_model"], cfg["n_head"], cfg["d_head"]
        B, T = self.batch, self.n_pos
        layer = self._layer(layer, fn)
        p = self._pos(pos_slice, fn)
        if layer == 0:
            raise ValueError(f"{fn}: layer 0 has no heads before it (give 1..{nl}, or None for all)")
        Tn = T if p < 0 else 1
        out = np.empty((layer * H, B, Tn, D), dtype=np.float32)
        for l in range(layer):
            name = f"blocks.{l}.attn.hook_result"
            if dict.__contains__(self, name):
                r = self._need(fn, name, H * D).reshape(B, T, H, D).transpose(2, 0, 1, 3)  # [H, B, T, D]
            else:
                z = self._need(fn, f"blocks.{l}.attn.hook_z", H * Dh)
                r = self.model._cache_head_results(l, z).reshape(H, B, T, D)
            out[l * H:(l + 1) * H] = r if p < 0 else r[:, :, p:p + 1]
        if p >= 0:
            out = out.reshape(layer * H, B, D)
        if apply_ln:
            self._apply_ln(fn, out, layer, False, p)
        if return_labels:
            return out, [f"L{l}H{h}" for l in range(layer) for h in range(H)]
        return out

    def stack_activation(self, activation_name, layer=-1, sublayer_type=None):
        """cache[activation_name, l] of blocks 0..layer-1 (-1: all) stacked: [layer, ...]."""
        nl = self._cfg()["n_layer"]
        n = nl if layer == -1 else layer
        return np.stack([self[(activation_name, l, sublayer_type) if sublayer_type else (activation_name, l)]
                         for l in range(n)])

    def apply_ln_to_stack(self, residual_stack, layer=None, mlp_input=False, pos_slice=None):
        """A new stack normalized with the cached scale of the norm reading block
        `layer`'s input (None: ln_final); its weight and bias are not applied."""
        fn = "apply_ln_to_stack"
        cfg = self._cfg()
        s = self._stack_arg(residual_stack, fn)
        layer = self._layer(layer, fn)
        p = self._pos(pos_slice, fn)
        if mlp_input and layer >= cfg["n_layer"]:
            raise ValueError(f"{fn}: mlp_input needs a block's layer")
        if s.ndim == 3 and p < 0:
            if self.n_pos != 1:
                raise ValueError(f"{fn}: a [components, batch, d_model] stack has no position axis: say which "
                                 f"position it holds with pos_slice")
            p = 0
        if s.ndim == 4 and p >= 0:
            o = np.ascontiguousarray(s[:, :, p], dtype=np.float32)
            return self._apply_ln(fn, o, layer, mlp_input, p)
        o = np.array(s, dtype=np.float32, order="C", copy=True)
        return self._apply_ln(fn, o, layer, mlp_input, p if s.ndim == 3 else -1)

    def _stack_arg(self, s, fn):
        s = np.asarray(s, dtype=np.float32)
        B, T, D = self.batch, self.n_pos, self._cfg()["d_model"]
        if not ((s.ndim == 4 and s.shape[1:] == (B, T, D)) or (s.ndim == 3 and s.shape[1:] == (B, D))):
            raise ValueError(f"{fn}: the stack must be [components, {B}, {T}, {D}] or [components, {B}, {D}] (this "
                             f"cache's batch, positions, d_model); got {tuple(s.shape)}")
        return s

    def _ids(self, v, fn, what):
        B = self.batch
        a = np.asarray(v)
        if a.ndim == 0:
            a = np.full(B, int(a))
        if a.ndim != 1 or a.shape[0] != B or (a.size and not np.issubdtype(a.dtype, np.integer)):
            raise ValueError(f"{fn}: {what} must be a token id or {B} ids (one per batch row)")
        return a.astype(np.int32)

    def logit_attrs(self, residual_stack, tokens, incorrect_tokens=None, pos_slice=None, return_bias=False):
        """Direct logit attribution of each component: [C, B, T] ([C, B] with a [C, B, D]
        stack or pos_slice) = stack . (w_lnf * (W_U[tokens] - W_U[incorrect_tokens])).
        return_bias=True also returns the final LayerNorm bias's constant [B]."""
        fn = "logit_attrs"
        s = self._stack_arg(residual_stack, fn)
        p = self._pos(pos_slice, fn)
        if s.ndim == 3 and p >= 0:
            raise ValueError(f"{fn}: pos_slice selects a position of a [components, batch, positions, d_model] "
                             f"stack; this one has none")
        tok = self._ids(tokens, fn, "tokens")
        inc = None if incorrect_tokens is None else self._ids(incorrect_tokens, fn, "incorrect_tokens")
        if s.ndim == 4 and p >= 0:
            s = s[:, :, p]
        x = s if s.ndim == 4 else s[:, :, None, :]
        attrs, bias = self.model._cache_logit_attrs(np.ascontiguousarray(x), tok, inc)
        if s.ndim == 3:
            attrs = attrs.reshape(attrs.shape[0], attrs.shape[1])
        return (attrs, bias) if return_bias else attrs

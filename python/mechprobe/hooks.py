"""What a hook function receives beside the activation (TransformerLens's
HookPoint), and mechprobe.attribution_patch.

A hook is called as fn(act, hook): `act` is a float32 numpy array of the
activation (its own memory: the function may keep it), `hook` a HookPoint
saying where it is. Return None (after editing `act` in place, or not) or an
array of act's shape to replace it.
"""

__all__ = ["HookPoint", "attribution_patch"]


class _Layer(int):
    """The block index (-1 for global points); an int that may also be called,
    as TransformerLens's hook.layer()."""

    __slots__ = ()

    def __call__(self):
        return int(self)


class HookPoint:
    """Where a hook fires.

    name        the hook point's name, e.g. "blocks.0.attn.hook_pattern"
    layer       its block (-1 for hook_embed, hook_pos_embed, ln_final.*);
                hook.layer() works too, as in TransformerLens
    full_shape  the shape of the whole activation of this pass
    axis, offset  attention scores and patterns may arrive in blocks of query
                rows: act is full[:, :, offset:offset + act.shape[2]] (axis 2)
                for those, act is the whole activation (offset 0) otherwise
    pos0        the absolute position of act's first row (generation steps)
    ctx         a dict the function may use freely (TransformerLens's ctx)
    """

    __slots__ = ("name", "layer", "axis", "offset", "pos0", "full_shape", "ctx")

    def __init__(self, name, layer, axis, offset, pos0, full_shape):
        self.name = name
        self.layer = _Layer(layer)
        self.axis = axis
        self.offset = offset
        self.pos0 = pos0
        self.full_shape = full_shape
        self.ctx = {}

    def __repr__(self):
        return f"HookPoint({self.name!r})"


def attribution_patch(model, clean, corrupt, names, metric, per="position", targets=None):
    """mechprobe.attribution_patch(m, clean, corrupt, names, metric, per="position",
    targets=None) -> ({name: estimate}, {"clean": value, "corrupt": value}),
    as mp.attribution_patch: the first-order estimate (clean - corrupt) * grad of
    patching each selected hook point's clean activation into the corrupted run,
    summed per `per` ("position", "head", "head_position", "neuron" or "all").
    metric: "ce" (with targets=), {"logit_diff": (correct, wrong)} or a function
    logits -> (value, dlogits)."""
    return model.attribution_patch(clean, corrupt, names, metric, per=per, targets=targets)

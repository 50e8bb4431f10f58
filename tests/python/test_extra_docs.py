"""Every ```python example of docs/python_extra.md runs as written, in order in
one namespace, in a scratch folder whose out/quickstart/model.h5 is a small
byte-level model standing in for the quickstart's."""
import os
import re

import mechprobe

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python_extra.md")


def test_examples_run(tmp_path, monkeypatch):
    text = open(DOC, encoding="utf-8").read()
    blocks = re.findall(r"\n```python\n(.*?)```", "\n" + text, re.S)
    assert len(blocks) >= 8
    (tmp_path / "out" / "quickstart").mkdir(parents=True)
    cfg = {"d_model": 32, "n_layer": 2, "n_head": 4, "vocab": 260, "ctx": 64}
    with mechprobe.Model(cfg, seed=1, init_std=0.1, tokenizer="bytes") as m:
        m.save(str(tmp_path / "out" / "quickstart" / "model.h5"))
    monkeypatch.chdir(tmp_path)
    ns = {}
    for i, b in enumerate(blocks):
        exec(compile(b, f"docs/python_extra.md example {i + 1}", "exec"), ns)

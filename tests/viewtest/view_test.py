#!/usr/bin/python3
"""view_test.py — tests of `mechprobe view` pages in a real browser (tests/view.cmake).

Each page is loaded from a file URL by headless Chromium (Debian's `chromium`,
one browser per test driven over the DevTools protocol): its script runs, the
test reads the DOM and takes a screenshot of the 1200 x 900 viewport. The
assertions compare what the page shows with the run file read independently
(h5dump, hdf5-tools) and with the results folder's files:

  run      a capture of ../shared's aidreams260K model (mechprobe capture): the
           attention view (head count, token count, every head's sink share, the
           chosen query's weights within the page's stated quantisation bound),
           the activations view (every series, per token: a unit, a logit, the
           per-position loss recomputed from /logits), the Q/K geometry (the PCA
           of the pooled rotated q and k recomputed here with a Jacobi
           eigensolver, up to each component's sign);
  reports  each shipped probe's quick-run folder (tests/data/rejudge/*) and the
           committed results/*/ folders: every verdict row with its id and word,
           the figures (decoded by the browser) and the evidence datasets;
  errors   bad inputs: a clear message naming the file and what is missing, a
           non-zero exit, no page and no temporary left; and the pages' data read
           without a browser: a direction series (CLI and Lua API), token strings.

Every page: no script error (#errors, fed by window.onerror and console.error,
is empty), the script finished (body[data-ready]), no network reference, and a
non-blank screenshot (more than 16 distinct colours, no colour over 98% of the
pixels). Exit 77 (ctest SKIP) when no browser or no ../shared model exists.
Usage: view_test.py run|reports|errors MECHPROBE SRC_DIR SHARED_DIR WORK_DIR
"""
import base64
import html.parser
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib

MODE, MECHPROBE, SRC, SHARED, WORK = sys.argv[1:6]
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL: " + what)
    return cond


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


def browser():
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


# ---------------------------------------------------------------- the browser

class Browser:
    """One headless Chromium for all the pages of a test, driven over the DevTools
    protocol (--remote-debugging-pipe: JSON messages ending in NUL on the
    browser's fds 3 and 4), so that its start is paid once."""

    def __init__(self):
        self.prof = os.path.join(WORK, "profile")
        shutil.rmtree(self.prof, ignore_errors=True)
        r3, w3 = os.pipe()
        r4, w4 = os.pipe()

        def child():
            os.dup2(r3, 3)
            os.dup2(w4, 4)

        self.proc = subprocess.Popen([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                      "--mute-audio", "--hide-scrollbars", "--user-data-dir=" + self.prof,
                                      "--remote-debugging-pipe", "about:blank"], pass_fds=(3, 4), preexec_fn=child,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(r3)
        os.close(w4)
        self.out, self.inp, self.buf, self.mid = os.fdopen(w3, "wb"), r4, b"", 0

    def call(self, method, params=None, session=None, timeout=120):
        self.mid += 1
        m = {"id": self.mid, "method": method, "params": params or {}}
        if session:
            m["sessionId"] = session
        self.out.write(json.dumps(m).encode() + b"\0")
        self.out.flush()
        t0 = time.time()
        while True:
            while b"\0" not in self.buf:
                if time.time() - t0 > timeout:
                    raise RuntimeError("the browser did not answer %s in %d s" % (method, timeout))
                chunk = os.read(self.inp, 1 << 20)
                if not chunk:
                    raise RuntimeError("the browser closed")
                self.buf += chunk
            msg, self.buf = self.buf.split(b"\0", 1)
            r = json.loads(msg)
            if r.get("id") == self.mid:
                if "error" in r:
                    raise RuntimeError("%s: %s" % (method, r["error"]))
                return r["result"]

    def close(self):
        try:
            self.call("Browser.close", timeout=30)
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()
        shutil.rmtree(self.prof, ignore_errors=True)


BROWSER = None


def load(page, fragment, shot):
    """Opens file://page#fragment in a new tab, waits until the page's script has
    finished (body[data-ready], at most 60 s), saves a screenshot of the 1200 x 900
    viewport (at half scale: 600 x 450) and returns the DOM."""
    global BROWSER
    if BROWSER is None:
        BROWSER = Browser()
    b = BROWSER
    url = "file://" + os.path.abspath(page) + ("#" + fragment if fragment else "")
    t0 = time.time()
    tid = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    sid = b.call("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]
    b.call("Emulation.setDeviceMetricsOverride", {"width": 1200, "height": 900, "deviceScaleFactor": 1,
                                                  "mobile": False}, sid)
    b.call("Page.navigate", {"url": url}, sid)

    def ev(expr):
        return b.call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, sid)["result"].get("value")

    ready = None
    while time.time() - t0 < 60:
        ready = ev("document.body && document.body.dataset.ready || ''")
        if ready == "1":
            break
        time.sleep(0.05)
    html = ev("document.documentElement.outerHTML")
    png = b.call("Page.captureScreenshot", {"format": "png", "clip": {"x": 0, "y": 0, "width": 1200, "height": 900,
                                                                     "scale": 0.5}}, sid)["data"]
    open(shot, "wb").write(base64.b64decode(png))
    b.call("Target.closeTarget", {"targetId": tid})
    print("  browser: %s#%s  %.2f s" % (os.path.basename(page), fragment, time.time() - t0))
    dom = Dom(html)
    errs = dom.text_of("errors")
    check(errs.strip() == "", "%s#%s: script errors: %s" % (page, fragment, errs))
    check(ready == "1", "%s#%s: the page's script did not finish in 60 s" % (page, fragment))
    check_screenshot(shot)
    return dom


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.kids, self.text = tag, dict(attrs), parent, [], ""

    def get(self, k, d=None):
        return self.attrs.get(k, d)

    def all_text(self):
        return self.text + "".join(k.all_text() for k in self.kids)

    def find_all(self, pred):
        out = []
        for k in self.kids:
            if pred(k):
                out.append(k)
            out.extend(k.find_all(pred))
        return out


class Dom(html.parser.HTMLParser):
    VOID = {"meta", "br", "img", "input", "hr", "link", "area", "base", "col", "embed", "source", "wbr"}

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root
        self.by_id = {}
        self.body = self.root
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.kids.append(n)
        if n.get("id"):
            self.by_id[n.get("id")] = n
        if tag == "body":
            self.body = n
        if tag not in self.VOID:
            self.cur = n

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.text += data

    def id(self, i):
        return self.by_id.get(i)

    def text_of(self, i):
        n = self.id(i)
        return n.all_text() if n else ""

    def select(self, i, tag=None, cls=None):
        n = self.id(i)
        if not n:
            return []
        return n.find_all(lambda k: (tag is None or k.tag == tag) and
                          (cls is None or cls in (k.get("class") or "").split()))


# ------------------------------------------------------------- PNG decoding

def png_pixels(path):
    """Decodes an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes): (w, h, rows)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, inter = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and inter == 0, "unsupported PNG %d/%d/%d" % (depth, ctype, inter)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def check_screenshot(path):
    if not check(os.path.exists(path) and os.path.getsize(path) > 0, "no screenshot " + path):
        return
    w, h, bpp, rows = png_pixels(path)
    counts = {}
    for line in rows[::3]:
        for x in range(0, w * bpp, 3 * bpp):
            c = bytes(line[x:x + 3])
            counts[c] = counts.get(c, 0) + 1
    total = sum(counts.values())
    top = max(counts.values())
    print("  screenshot %s: %dx%d, %d colours, the commonest %.1f%%" % (os.path.basename(path), w, h, len(counts),
                                                                        100.0 * top / total))
    check(len(counts) > 16 and top < 0.98 * total, "screenshot %s is blank (%d colours)" % (path, len(counts)))


# ---------------------------------------------------------------- h5dump

def h5(path, dataset, start=None, count=None):
    """The values of a dataset (or a hyperslab of it) as floats, read by h5dump."""
    cmd = ["h5dump", "-w", "0", "-y", "-m", "%.9g", "-d", dataset]
    if start is not None:
        cmd += ["-s", ",".join(map(str, start)), "-c", ",".join(map(str, count))]
    r = run(cmd + [path])
    assert r.returncode == 0, r.stderr
    body = r.stdout[r.stdout.index("DATA {") + 6:]
    body = body[:body.rindex("}")]
    return [float(x) for x in re.findall(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)", body)]


def shape(path, dataset):
    r = run(["h5dump", "-H", "-d", dataset, path])
    m = re.search(r"DATASPACE\s+SIMPLE\s+\{\s*\(\s*([\d, ]+)\)", r.stdout)
    return [int(x) for x in m.group(1).split(",")]


def no_network(page):
    text = open(page, encoding="utf-8", errors="replace").read()
    bad = re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", text) + re.findall(r"<link\b", text) + \
        re.findall(r"<script[^>]*\bsrc=", text) + re.findall(r"""(?:fetch|import)\(\s*["']https?:""", text)
    check(not bad, "%s references the network: %s" % (page, bad[:3]))


# ------------------------------------------------------------------ the tests

def jacobi_eig(a):
    """Eigen-decomposition of a small symmetric matrix (list of lists): (values, vectors as columns)."""
    n = len(a)
    a = [row[:] for row in a]
    v = [[float(i == j) for j in range(n)] for i in range(n)]
    for _ in range(100):
        off = sum(a[i][j] ** 2 for i in range(n) for j in range(n) if i != j)
        if off < 1e-22:
            break
        for p in range(n):
            for q in range(p + 1, n):
                if abs(a[p][q]) < 1e-300:
                    continue
                theta = (a[q][q] - a[p][p]) / (2 * a[p][q])
                t = (1 if theta >= 0 else -1) / (abs(theta) + math.sqrt(theta * theta + 1))
                c = 1 / math.sqrt(t * t + 1)
                s = t * c
                for k in range(n):
                    akp, akq = a[k][p], a[k][q]
                    a[k][p], a[k][q] = c * akp - s * akq, s * akp + c * akq
                for k in range(n):
                    apk, aqk = a[p][k], a[q][k]
                    a[p][k], a[q][k] = c * apk - s * aqk, s * apk + c * aqk
                for k in range(n):
                    vkp, vkq = v[k][p], v[k][q]
                    v[k][p], v[k][q] = c * vkp - s * vkq, s * vkp + c * vkq
    return [a[i][i] for i in range(n)], v


def test_run():
    model = os.path.join(SHARED, "models", "aidreams260K.bin")
    tok = os.path.join(SHARED, "models", "aidreams260K.tok512.bin")
    if not os.path.exists(model):
        skip("no ../shared model " + model)
    text = "Once upon a time, there was a little cat named Tom. He liked to play."
    cap = os.path.join(WORK, "capture.h5")
    r = run([MECHPROBE, "capture", "--model", model, "--tokenizer", tok, "--text", text, "--hooks", "*",
             "--logits", "--out", cap])
    assert r.returncode == 0, r.stderr
    page = os.path.join(WORK, "capture.html")
    series = ["loss", "blocks.1.mlp.hook_post:5", "logit:42", "blocks.0.attn.hook_z:1.3",
              "norm:blocks.3.hook_resid_post"]
    r = run([MECHPROBE, "view", cap, "--out", page, "--model", model, "--tokenizer", tok, "--acts", ",".join(series)])
    print(r.stdout.strip())
    assert r.returncode == 0, r.stderr
    no_network(page)
    B, H, T, _ = shape(cap, "/acts/blocks.0.attn.hook_pattern")
    L = 0
    while run(["h5dump", "-H", "-d", "/acts/blocks.%d.attn.hook_pattern" % L, cap]).returncode == 0:
        L += 1
    # --- attention: layer 1, head 2, the last query
    layer, head, q = 1, 2, T - 1
    dom = load(page, "view=attn&layer=%d&head=%d&query=%d" % (layer, head, q), os.path.join(WORK, "view_attn.png"))
    thumbs = dom.select("attn-grid", "div", "thumb")
    check(len(thumbs) == L * H, "head grid: %d thumbnails, the run has %d layers x %d heads" % (len(thumbs), L, H))
    toks = dom.select("attn-tokens", "span", "tok")
    check(len(toks) == T, "attention view: %d tokens shown, the run has %d" % (len(toks), T))
    shown = "".join(t.all_text() for t in toks).replace("\u2205", "")   # an empty piece (BOS) shows as U+2205
    check(shown == text, "token text %r differs from the captured text %r" % (shown, text))
    for th in thumbs:
        l, h = int(th.get("data-layer")), int(th.get("data-head"))
        col0 = h5(cap, "/acts/blocks.%d.attn.hook_pattern" % l, [0, h, 0, 0], [1, 1, T, 1])
        want = sum(col0) / T
        check(abs(float(th.get("data-sink")) - want) <= 5e-5 + 1e-6,
              "sink share of layer %d head %d: page %s, run file %.6f" % (l, h, th.get("data-sink"), want))
        check(("sink" in th.get("class").split()) == (want > 0.3), "layer %d head %d: sink outline wrong" % (l, h))
    row = h5(cap, "/acts/blocks.%d.attn.hook_pattern" % layer, [0, head, q, 0], [1, 1, 1, T])
    table = dom.id("attn-row")
    cells = dom.select("attn-row", "tr")
    cells = [c for c in cells if c.get("data-k") is not None]
    check(table is not None and table.get("data-query") == str(q), "attention row: query %s shown, %d asked" %
          (table.get("data-query") if table else None, q))
    check(len(cells) == q + 1, "attention row: %d keys shown for query %d" % (len(cells), q))
    worst = 0.0
    for c in cells:
        k, v = int(c.get("data-k")), float(c.get("data-v"))
        bound = math.sqrt(row[k]) / 255 + 1 / (4 * 255 * 255) + 1e-7   # the page's sqrt-byte encoding
        worst = max(worst, abs(v - row[k]) / bound)
        check(abs(v - row[k]) <= bound, "layer %d head %d query %d key %d: page %g, run file %g (bound %g)" %
              (layer, head, q, k, v, row[k], bound))
    check(abs(sum(row[:q + 1]) - 1) < 1e-4, "the run file's row does not sum to 1")
    print("  attention: %d heads, %d tokens; query %d's %d weights within %.2f of the stated bound" %
          (len(thumbs), T, q, len(cells), worst))
    # --- activations: every series, per token
    dom = load(page, "view=acts&series=loss&values=1", os.path.join(WORK, "view_acts.png"))
    check(len(dom.select("acts-tokens", "span", "tok")) == T, "activations view: not %d tokens" % T)
    rows = {r.get("data-series"): [c.get("data-v") for c in r.kids if c.tag == "td"]
            for r in dom.select("acts-values", "tr")}
    check(sorted(rows) == sorted(series), "series shown %s, asked %s" % (sorted(rows), series))
    toks = [int(x) for x in h5(cap, "/tokens")]
    logits = h5(cap, "/logits")
    V = len(logits) // T
    want = {}
    loss = []
    for t in range(T):
        lg = logits[t * V:(t + 1) * V]
        if t + 1 < T:
            m = max(lg)
            loss.append(m + math.log(sum(math.exp(x - m) for x in lg)) - lg[toks[t + 1]])
        else:
            loss.append(float("nan"))
    want["loss"] = loss
    want["logit:42"] = [logits[t * V + 42] for t in range(T)]
    want["blocks.1.mlp.hook_post:5"] = h5(cap, "/acts/blocks.1.mlp.hook_post", [0, 0, 5], [1, T, 1])
    want["blocks.0.attn.hook_z:1.3"] = h5(cap, "/acts/blocks.0.attn.hook_z", [0, 0, 1, 3], [1, T, 1, 1])
    rp = h5(cap, "/acts/blocks.3.hook_resid_post")
    D = len(rp) // T
    want["norm:blocks.3.hook_resid_post"] = [math.sqrt(sum(x * x for x in rp[t * D:(t + 1) * D])) for t in range(T)]
    for s, vals in want.items():
        got = rows.get(s, [])
        check(len(got) == T, "series %s: %d values shown" % (s, len(got)))
        for t, (g, w) in enumerate(zip(got, vals)):
            if math.isnan(w):
                check(g == "nan", "series %s pos %d: %s shown, no value expected" % (s, t, g))
                continue
            check(abs(float(g) - w) <= 1e-5 * max(1.0, abs(w)), "series %s pos %d: page %s, expected %.7g" %
                  (s, t, g, w))
    shown = [t.get("data-v") for t in dom.select("acts-tokens", "span", "tok")]
    check(shown == rows.get("loss"), "the coloured tokens do not carry the loss values")
    print("  activations: %d series x %d tokens as expected (loss recomputed from /logits)" % (len(want), T))
    # --- Q/K geometry: layer 1, head 2
    dom = load(page, "view=geom&glayer=%d&ghead=%d&points=1" % (layer, head), os.path.join(WORK, "view_geom.png"))
    info = dom.id("geom-info")
    check(info is not None and info.get("data-points") == str(2 * T), "geometry: not %d points" % (2 * T))
    _, _, Hq, Dh = shape(cap, "/acts/blocks.%d.attn.hook_rot_q" % layer)
    K = shape(cap, "/acts/blocks.%d.attn.hook_rot_k" % layer)[2]
    qv = h5(cap, "/acts/blocks.%d.attn.hook_rot_q" % layer, [0, 0, head, 0], [1, T, 1, Dh])
    kv = h5(cap, "/acts/blocks.%d.attn.hook_rot_k" % layer, [0, 0, head // (Hq // K), 0], [1, T, 1, Dh])
    X = [qv[t * Dh:(t + 1) * Dh] for t in range(T)] + [kv[t * Dh:(t + 1) * Dh] for t in range(T)]
    n = len(X)
    mu = [sum(x[j] for x in X) / n for j in range(Dh)]
    C = [[sum((x[i] - mu[i]) * (x[j] - mu[j]) for x in X) / (n - 1) for j in range(Dh)] for i in range(Dh)]
    vals, vecs = jacobi_eig(C)
    order = sorted(range(Dh), key=lambda i: -vals[i])
    pts = {int(r.get("data-i")): (float(r.get("data-x")), float(r.get("data-y"))) for r in dom.select("geom-points", "tr")}
    check(len(pts) == n, "geometry: %d points listed, %d expected" % (len(pts), n))
    for comp in (0, 1):
        e = [vecs[j][order[comp]] for j in range(Dh)]
        proj = [sum((x[j] - mu[j]) * e[j] for j in range(Dh)) for x in X]
        spread = math.sqrt(vals[order[comp]])
        got = [pts.get(i, (0, 0))[comp] for i in range(n)]
        sign = 1 if sum(g * p for g, p in zip(got, proj)) >= 0 else -1
        err = max(abs(g - sign * p) for g, p in zip(got, proj))
        check(err <= 1e-3 * spread + 1e-5, "geometry: PC%d differs from the recomputed PCA by %.3g (spread %.3g)" %
              (comp + 1, err, spread))
    print("  geometry: %d points, both components within 1e-3 of the spread of an independent PCA" % n)


def folders():
    out = []
    for base in (os.path.join(SRC, "tests", "data", "rejudge"), os.path.join(SRC, "results")):
        for d in sorted(os.listdir(base)):
            if os.path.exists(os.path.join(base, d, "verdicts.tsv")):
                out.append(os.path.join(base, d))
    return out


def test_reports():
    global BIG
    pngs = lambda d: sum(f.endswith(".png") for f in os.listdir(d))
    BIG = max((d for d in folders() if "rejudge" not in d), key=pngs)
    for d in folders():
        name = ("quick_" if "rejudge" in d else "results_") + os.path.basename(d)
        page = os.path.join(WORK, name + ".html")
        r = run([MECHPROBE, "view", d, "--out", page])
        print(r.stdout.strip())
        if not check(r.returncode == 0, "view %s failed: %s" % (d, r.stderr)):
            continue
        no_network(page)
        lines = [l.rstrip("\r") for l in open(os.path.join(d, "verdicts.tsv"), encoding="utf-8").read().split("\n")]
        hdr = lines[0].split("\t")
        rows = [dict(zip(hdr, l.split("\t"))) for l in lines[1:] if l.strip()]
        pngs = sorted(os.path.relpath(os.path.join(r_, f), d) for r_, _, fs in os.walk(d) for f in fs
                      if f.endswith(".png") and os.path.relpath(r_, d).count(os.sep) == 0)
        # the quick runs in the browser; of the committed folders, the one with the most figures
        # (the others: their page's metadata, to keep the suite's browser time small)
        if "rejudge" not in d and d != BIG:
            meta = json.loads(re.search(r'<script type="application/json" id="mp-meta">(.*?)</script>',
                                        open(page, encoding="utf-8").read(), re.S).group(1))
            check([r["id"] for r in meta["rows"]] == [r["id"] for r in rows], "%s: rows differ" % page)
            continue
        dom = load(page, "view=report", os.path.join(WORK, name + ".png"))
        shown = dom.select("report-table", "tr", "vrow")
        check([(t.get("data-id"), t.get("data-word")) for t in shown] == [(r["id"], r["word"]) for r in rows],
              "%s: verdict rows shown %s differ from verdicts.tsv" % (d, [t.get("data-id") for t in shown]))
        det = dom.id("report-detail")
        check(det is not None and det.get("data-row") == rows[0]["id"], "%s: no detail of the first row" % d)
        dd = {n.get("data-key"): n.all_text() for n in dom.select("report-detail", "dd")}
        for k in ("seed_values", "rule", "ours"):
            if rows[0][k]:
                check(dd.get(k) == rows[0][k], "%s: row %s's %s differs" % (d, rows[0]["id"], k))
        imgs = dom.select("report-figures", "img")
        check(sorted(i.get("data-name") for i in imgs) == pngs, "%s: figures %s, the folder has %s" %
              (d, [i.get("data-name") for i in imgs], pngs))
        for i in imgs:
            check(re.match(r"^\d+x\d+$", i.get("data-loaded") or ""), "%s: figure %s did not decode (%s)" %
                  (d, i.get("data-name"), i.get("data-loaded")))
        links = dom.select("report-table", "a", "figlink")
        for a in links:
            check(a.get("data-fig") in pngs, "%s: a row links to a missing figure %s" % (d, a.get("data-fig")))
        print("  report %s: %d rows, %d figures (%d row links)" % (os.path.basename(d), len(shown), len(imgs),
                                                                  len(links)))


def expect_fail(args, out, words, what):
    d = os.path.dirname(out)
    before = set(os.listdir(d))
    r = run([MECHPROBE] + args)
    msg = r.stderr.strip()
    check(r.returncode != 0, "%s: exit 0" % what)
    for w in words:
        check(w in msg, "%s: the message does not say %r: %s" % (what, w, msg))
    check(not os.path.exists(out), "%s: a page was written" % what)
    left = set(os.listdir(d)) - before
    check(not left, "%s: left %s" % (what, sorted(left)))
    check("traceback" not in msg.lower(), "%s: a traceback instead of a message: %s" % (what, msg))
    print("  %s -> %s" % (what, msg.splitlines()[-1] if msg else "(no message)"))


def test_errors():
    cap = os.path.join(WORK, "small.h5")
    run_lua = ("local m = mp.model.new{d_model = 16, n_layer = 2, n_head = 2, d_head = 8, d_mlp = 32, vocab = 300, "
               "ctx = 16, seed = 1, tokenizer = 'bytes'}; m:capture({1, 2, 3, 4}, {out = '%s', "
               "hooks = 'blocks.*.hook_resid_post'})" % cap)
    r = run([MECHPROBE, "-e", run_lua])
    assert r.returncode == 0, r.stderr
    out = os.path.join(WORK, "bad.html")
    notrun = os.path.join(SRC, "results", "sinks_full", "sinks_train.h5")
    expect_fail(["view", notrun, "--out", out], out, [notrun, "not a mechprobe run file"], "a non-run HDF5 file")
    missing = os.path.join(WORK, "no_such.h5")
    expect_fail(["view", missing, "--out", out], out, [missing], "a missing file")
    expect_fail(["view", cap, "--out", out, "--acts", "blocks.1.attn.hook_pattern:0"], out,
                [cap, "/acts/blocks.1.attn.hook_pattern"], "a series of a hook not captured")
    expect_fail(["view", cap, "--out", out, "--layers", "7"], out, [cap, "layer 7 is out of range"],
                "an unknown layer")
    expect_fail(["view", cap, "--out", out, "--acts", "logit:3"], out, [cap, "/logits"], "logits not captured")
    expect_fail(["view", cap, "--out", out, "--batch", "3"], out, [cap, "batch row 3"], "a batch row out of range")
    expect_fail(["-e", "mp.view.run('%s', {out = '%s', attention = true})" % (cap, out)], out,
                [cap, "no attention pattern captured"], "attention asked of a run without patterns")
    expect_fail(["-e", "mp.view.run('%s', {out = '%s', geometry = true, layers = {1}})" % (cap, out)], out,
                [cap, "hook_rot_q"], "geometry asked of a layer without rotated q/k")
    expect_fail(["view", WORK, "--out", out], out, [WORK, "no verdicts.tsv"], "a folder that is no results folder")
    bad = os.path.join(WORK, "badres")
    os.makedirs(bad, exist_ok=True)
    open(os.path.join(bad, "verdicts.tsv"), "w").write("id\tclaim\nC1\tx\n")
    expect_fail(["view", bad, "--out", out], out, [bad, 'no column "paper"'], "a verdict table without its columns")
    # good pages of the same run (no attention or geometry captured), read without a browser:
    # the default series (the norms of the two hook_resid_post), a direction given to the
    # CLI as a file and to the Lua API as a table, and token strings given to the Lua API
    good = os.path.join(WORK, "small.html")
    r = run([MECHPROBE, "view", cap, "--out", good])
    check(r.returncode == 0 and "2 series" in r.stdout, "the small run's page: %s %s" % (r.stdout, r.stderr))
    resid = h5(cap, "/acts/blocks.1.hook_resid_post")
    T = 4
    D = len(resid) // T
    direction = [((7 * i) % 5 - 2) / 3.0 for i in range(D)]
    want = [sum(resid[t * D + j] * direction[j] for j in range(D)) for t in range(T)]
    norms = [math.sqrt(sum(x * x for x in resid[t * D:(t + 1) * D])) for t in range(T)]
    dfile = os.path.join(WORK, "dir.txt")
    open(dfile, "w").write("\n".join(repr(x) for x in direction) + "\n")
    page_cli = os.path.join(WORK, "small_dir.html")
    r = run([MECHPROBE, "view", cap, "--out", page_cli, "--direction", "blocks.1.hook_resid_post=" + dfile, "--ids"])
    check(r.returncode == 0, "--direction: %s" % r.stderr)
    page_lua = os.path.join(WORK, "small_lua.html")
    lua = ("local s = mp.view.run('%s', {out = '%s', tokens = {'a', 'b', 'c', 'd'}, acts = {'norm:blocks.1.hook_resid_post', "
           "{hook = 'blocks.1.hook_resid_post', direction = {%s}, label = 'probe'}}}); assert(s.acts == 2 and s.T == 4)"
           % (cap, page_lua, ", ".join(repr(x) for x in direction)))
    r = run([MECHPROBE, "-e", lua])
    check(r.returncode == 0, "mp.view.run with a direction: %s" % r.stderr)
    for page, label, text in ((page_cli, "blocks.1.hook_resid_post . " + dfile, None),
                              (page_lua, "probe", ["a", "b", "c", "d"])):
        if not os.path.exists(page):
            continue
        doc = open(page, encoding="utf-8").read()
        meta = json.loads(re.search(r'<script type="application/json" id="mp-meta">(.*?)</script>', doc, re.S).group(1))
        check(meta["text"] == text, "%s: token text %s, given %s" % (page, meta["text"], text))
        series = {a["label"]: a["blob"] for a in meta["acts"]}
        for lab, vals in ((label, want), ("norm:blocks.1.hook_resid_post", norms)):
            if not check(lab in series, "%s: no series %r (has %s)" % (page, lab, sorted(series))):
                continue
            b64 = re.search(r'id="b-%s" data-enc="f32" data-n="%d">([^<]*)</script>' % (series[lab], T), doc).group(1)
            got = struct.unpack("<%df" % T, base64.b64decode(b64))
            check(all(abs(g - w) <= 1e-5 * max(1, abs(w)) for g, w in zip(got, vals)),
                  "%s: series %s = %s, expected %s" % (page, lab, got, vals))
    print("  direction series (CLI file, Lua table), token strings and default norms as expected")


def main():
    os.makedirs(WORK, exist_ok=True)
    if MODE in ("run", "reports") and not browser():
        skip("no headless Chromium (install Debian's chromium; ./setup.sh test does)")
    try:
        {"run": test_run, "reports": test_reports, "errors": test_errors}[MODE]()
    finally:
        if BROWSER is not None:
            BROWSER.close()
    if FAILS:
        print("%d failure(s)" % len(FAILS))
        sys.exit(1)
    print("ok")


main()

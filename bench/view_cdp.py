#!/usr/bin/python3
"""view_cdp.py — opens a `mechprobe view` page in headless Chromium over the
DevTools protocol (--remote-debugging-pipe: JSON messages ending in NUL on
the browser's fds 3 and 4; standard library only), waits until the page's
script has finished (body[data-ready]) and prints the times the page measured
(#perf, performance.now() in real time: a --dump-dom with
--virtual-time-budget would run the page on virtual time). For
bench/view_bench.sh.

    view_cdp.py CHROMIUM URL PROFILE_DIR
"""
import json
import os
import subprocess
import sys
import time

chrome, url, prof = sys.argv[1:4]
r3, w3 = os.pipe()   # the browser reads commands from its fd 3
r4, w4 = os.pipe()   # and writes replies to its fd 4


def child():
    os.dup2(r3, 3)
    os.dup2(w4, 4)


p = subprocess.Popen([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                      "--user-data-dir=" + prof, "--remote-debugging-pipe", "about:blank"],
                     pass_fds=(3, 4), preexec_fn=child, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.close(r3)
os.close(w4)
out = os.fdopen(w3, "wb")
buf, mid = b"", 0


def call(method, params=None, session=None):
    global buf, mid
    mid += 1
    m = {"id": mid, "method": method, "params": params or {}}
    if session:
        m["sessionId"] = session
    out.write(json.dumps(m).encode() + b"\0")
    out.flush()
    while True:
        while b"\0" not in buf:
            chunk = os.read(r4, 1 << 20)
            if not chunk:
                raise SystemExit("view_cdp: the browser closed")
            buf += chunk
        msg, buf = buf.split(b"\0", 1)
        r = json.loads(msg)
        if r.get("id") == mid:
            if "error" in r:
                raise SystemExit("view_cdp: " + str(r["error"]))
            return r["result"]


t0 = time.time()
tid = call("Target.createTarget", {"url": url})["targetId"]
sid = call("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]


def ev(expr):
    return call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, sid)["result"].get("value")


while ev("document.body && document.body.dataset.ready") != "1":
    if time.time() - t0 > 900:
        raise SystemExit("view_cdp: the page was not ready after 900 s")
    time.sleep(0.05)
perf = ev("Object.assign({}, document.getElementById('perf').dataset)")
print("  " + ", ".join("%s %s" % (k, v) for k, v in perf.items()))
print("  wall time from opening the tab to ready: %.2f s; JS heap %.0f MiB; script errors: %r" % (
    time.time() - t0, ev("performance.memory.usedJSHeapSize / 1048576"),
    ev("document.getElementById('errors').textContent")))
call("Browser.close")
p.wait(timeout=60)

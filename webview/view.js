/* view.js — the script of mechprobe's view pages (docs/VIEW.md): reads the
 * page's metadata (#mp-meta, JSON) and decodes only the arrays the shown view
 * needs from their base64 <script type="application/octet-stream"> blocks
 * (webview/view.h "Data encoding"). Views: attention patterns, token
 * activations, Q/K geometry, probe reports. State lives in the URL hash
 * (#view=attn&layer=1&head=2&query=5), so a link (or a test) opens a chosen
 * view; the values shown for the chosen query/series/point are also written
 * into the DOM (#attn-row, #acts-tokens, #geom-points) for tests to read. */
"use strict";
(function () {
  const META = JSON.parse(document.getElementById("mp-meta").textContent);
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    if (attrs) for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const perf = { start: performance.now() };
  const fmt = (v) => (v === null || !isFinite(v)) ? "–" : Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3)
    ? v.toExponential(3) : v.toPrecision(4);

  /* ---- state in the hash ---- */
  function readHash() {
    const s = {};
    for (const part of location.hash.replace(/^#/, "").split("&")) {
      if (!part) continue;
      const i = part.indexOf("=");
      s[decodeURIComponent(i < 0 ? part : part.slice(0, i))] = i < 0 ? "1" : decodeURIComponent(part.slice(i + 1));
    }
    return s;
  }
  const state = readHash();
  function writeHash() {
    const parts = [];
    for (const k in state) if (state[k] !== undefined && state[k] !== null) parts.push(k + "=" + encodeURIComponent(state[k]));
    history.replaceState(null, "", "#" + parts.join("&"));
  }
  const int = (v, d) => { const n = parseInt(v, 10); return isNaN(n) ? d : n; };

  /* ---- blobs ---- */
  function bytes(name) {
    const node = $("b-" + name);
    if (!node) throw new Error("no data block " + name);
    const bin = atob(node.textContent);
    const u = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
    return u;
  }
  async function inflate(u) {
    const stream = new Blob([u]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  const f32 = (name) => new Float32Array(bytes(name).buffer);
  const cache = new Map();     /* decoded attention heads, least recently used first */
  async function u8z(name) {
    if (cache.has(name)) { const v = cache.get(name); cache.delete(name); cache.set(name, v); return v; }
    const v = await inflate(bytes(name));
    cache.set(name, v);
    while (cache.size > 24) cache.delete(cache.keys().next().value);
    return v;
  }
  const unsq = (b) => (b / 255) * (b / 255);   /* byte -> probability */

  /* ---- colours ---- */
  function lerp(a, b, t) { return a.map((x, i) => Math.round(x + (b[i] - x) * t)); }
  const BLUES = [[255, 255, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
  function ramp(stops, t) {
    t = Math.max(0, Math.min(1, t)) * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(t));
    return lerp(stops[i], stops[i + 1], t - i);
  }
  const BLUE_LUT = [];
  for (let b = 0; b < 256; b++) BLUE_LUT.push(ramp(BLUES, b / 255));   /* bytes are sqrt-scaled already */
  const rgb = (c) => "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")";
  function diverging(v, m) {   /* blue - white - red, symmetric on m */
    const t = m > 0 ? Math.max(-1, Math.min(1, v / m)) : 0;
    return t < 0 ? lerp([255, 255, 255], [33, 102, 172], -t) : lerp([255, 255, 255], [178, 24, 43], t);
  }
  function sequential(v, lo, hi) {
    const t = hi > lo ? (v - lo) / (hi - lo) : 0;
    return ramp([[255, 255, 255], [254, 224, 144], [253, 141, 60], [189, 0, 38]], t);
  }

  /* ---- tooltip ---- */
  const tip = $("tip");
  function showTip(ev, text) {
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = (ev.clientX + 12) + "px";
    tip.style.top = (ev.clientY + 12) + "px";
  }
  function hideTip() { tip.hidden = true; }

  /* ---- tokens ---- */
  const T = META.T || 0;
  function tokenText(i) {
    if (META.text) return META.text[i];
    return "#" + META.tokens[i];
  }
  function tokenLabel(i) {   /* for tooltips: visible whitespace */
    return JSON.stringify(tokenText(i)) + " (pos " + i + ", id " + META.tokens[i] + ")";
  }
  function tokenSpans(box) {
    box.textContent = "";
    const spans = [];
    for (let i = 0; i < T; i++) {
      const s = el("span", { class: "tok", "data-i": i });
      const txt = tokenText(i);
      s.textContent = META.text ? (txt === "" ? "\u2205" : txt) : txt + " ";
      box.appendChild(s);
      spans.push(s);
    }
    return spans;
  }

  /* ================================================================ attention */
  const A = META.attention;
  const attn = { layer: 0, head: 0, query: null, pinned: null, mode: "to", data: null, spans: null };
  function attnLayers() { return A ? A.layers : []; }

  function setupAttention() {
    const ls = $("attn-layer"), hs = $("attn-head");
    A.layers.forEach((l) => ls.appendChild(el("option", { value: l }, String(l))));
    for (let h = 0; h < A.heads; h++) hs.appendChild(el("option", { value: h }, String(h)));
    attn.layer = A.layers.includes(int(state.layer, -1)) ? int(state.layer) : A.layers[0];
    attn.head = Math.min(Math.max(int(state.head, 0), 0), A.heads - 1);
    if (state.query !== undefined) attn.pinned = Math.min(Math.max(int(state.query, 0), 0), T - 1);
    if (state.mode === "from") { attn.mode = "from"; document.querySelector("input[name=attn-mode][value=from]").checked = true; }
    ls.value = attn.layer;
    hs.value = attn.head;
    ls.onchange = () => selectHead(int(ls.value), attn.head);
    hs.onchange = () => selectHead(attn.layer, int(hs.value));
    for (const r of document.querySelectorAll("input[name=attn-mode]"))
      r.onchange = () => { attn.mode = r.value; state.mode = r.value; writeHash(); paintTokens(); };
    attn.spans = tokenSpans($("attn-tokens"));
    attn.spans.forEach((s, i) => {
      s.onmouseenter = (ev) => { attn.query = i; paintTokens(); showTip(ev, tokenLabel(i)); };
      s.onmouseleave = () => { attn.query = null; paintTokens(); hideTip(); };
      s.onclick = () => { attn.pinned = attn.pinned === i ? null : i; state.query = attn.pinned === null ? undefined : attn.pinned; writeHash(); paintTokens(); renderRow(); };
    });
    const heat = $("attn-heat");
    const side = Math.max(T, Math.min(512, T * Math.max(1, Math.floor(400 / T))));
    heat.width = heat.height = T;
    heat.style.width = heat.style.height = Math.min(512, Math.max(side, 256)) + "px";
    heat.onmousemove = (ev) => {
      if (!attn.data) return;
      const r = heat.getBoundingClientRect();
      const q = Math.floor((ev.clientY - r.top) / r.height * T), k = Math.floor((ev.clientX - r.left) / r.width * T);
      if (q < 0 || q >= T || k < 0 || k >= T) return hideTip();
      const v = k <= q ? value(q, k) : 0;
      showTip(ev, "query " + q + " " + JSON.stringify(tokenText(q)) + "\nkey " + k + " " + JSON.stringify(tokenText(k)) + "\nweight " + fmt(v));
    };
    heat.onmouseleave = hideTip;
    heat.onclick = (ev) => {
      const r = heat.getBoundingClientRect();
      const q = Math.floor((ev.clientY - r.top) / r.height * T);
      if (q >= 0 && q < T) { attn.pinned = q; state.query = q; writeHash(); paintTokens(); renderRow(); }
    };
    buildGrid();
  }

  const rowStart = (q) => q * (q + 1) / 2;
  const value = (q, k) => unsq(attn.data[rowStart(q) + k]);

  function buildGrid() {
    const grid = $("attn-grid");
    grid.style.gridTemplateColumns = "3em repeat(" + A.heads + ", 46px)";
    grid.appendChild(el("span", { class: "gridlabel" }, ""));
    for (let h = 0; h < A.heads; h++) grid.appendChild(el("span", { class: "gridlabel" }, "h" + h));
    const S = A.thumb;
    inflate(bytes("thumbs")).then((th) => {
      A.layers.forEach((l, li) => {
        grid.appendChild(el("span", { class: "gridlabel" }, "L" + l));
        for (let h = 0; h < A.heads; h++) {
          const share = A.sink[li][h];
          const d = el("div", { class: "thumb" + (share > 0.3 ? " sink" : ""), "data-layer": l, "data-head": h,
                                "data-sink": share.toFixed(4), title: "layer " + l + " head " + h + ": sink share " + share.toFixed(3) });
          const c = el("canvas", { width: S, height: S });
          const ctx = c.getContext("2d"), img = ctx.createImageData(S, S);
          const off = (li * A.heads + h) * S * S;
          for (let i = 0; i < S * S; i++) {
            const col = BLUE_LUT[th[off + i]];
            img.data[4 * i] = col[0]; img.data[4 * i + 1] = col[1]; img.data[4 * i + 2] = col[2]; img.data[4 * i + 3] = 255;
          }
          ctx.putImageData(img, 0, 0);
          d.appendChild(c);
          d.appendChild(el("span", {}, share.toFixed(2)));
          d.onclick = () => { selectHead(l, h); window.scrollTo({ top: 0 }); };
          grid.appendChild(d);
        }
      });
      markGrid();
    });
  }
  function markGrid() {
    for (const d of document.querySelectorAll(".thumb"))
      d.classList.toggle("on", int(d.dataset.layer) === attn.layer && int(d.dataset.head) === attn.head);
  }

  async function selectHead(l, h) {
    const t0 = performance.now();
    attn.layer = l; attn.head = h;
    state.layer = l; state.head = h; writeHash();
    $("attn-layer").value = l; $("attn-head").value = h;
    markGrid();
    attn.data = await u8z("a" + l + "_" + h);
    drawHeat();
    paintTokens();
    renderRow();
    const li = A.layers.indexOf(l);
    $("attn-heat-note").textContent = "layer " + l + ", head " + h + ": sink share " + A.sink[li][h].toFixed(3) +
      " (mean attention to token 0)";
    perf.switch_ms = performance.now() - t0;
    $("perf").dataset.switchMs = perf.switch_ms.toFixed(2);
  }

  const LUT32 = new Uint32Array(256);   /* RGBA packed little-endian, as ImageData's bytes */
  BLUE_LUT.forEach((c, i) => { LUT32[i] = (255 << 24 | c[2] << 16 | c[1] << 8 | c[0]) >>> 0; });
  function drawHeat() {
    const c = $("attn-heat"), ctx = c.getContext("2d"), img = ctx.createImageData(T, T);
    const px = new Uint32Array(img.data.buffer), data = attn.data, grey = (255 << 24 | 245 << 16 | 245 << 8 | 245) >>> 0;
    for (let q = 0, r0 = 0; q < T; r0 += ++q) {
      const o = q * T;
      for (let k = 0; k <= q; k++) px[o + k] = LUT32[data[r0 + k]];
      px.fill(grey, o + q + 1, o + T);
    }
    ctx.putImageData(img, 0, 0);
    const q = attn.pinned;
    if (q !== null) {
      ctx.strokeStyle = "rgba(220,38,38,0.8)";
      ctx.lineWidth = Math.max(1, T / 256);
      ctx.strokeRect(0, q, q + 1, 1);
    }
  }

  function paintTokens() {
    if (!attn.data) return;
    const q = attn.query !== null ? attn.query : attn.pinned;
    attn.spans.forEach((s, i) => {
      s.classList.toggle("sel", i === attn.pinned);
      s.classList.toggle("q", i === attn.query);
      s.style.background = "";
      s.style.borderBottomColor = "transparent";
    });
    const top = $("attn-top");
    if (q === null) { top.textContent = "hover a token: the colours show where it attends (or, switched, what attends to it); click to pin"; return; }
    const lst = [];
    if (attn.mode === "to") {
      for (let k = 0; k <= q; k++) { const v = value(q, k); attn.spans[k].style.background = rgb(BLUE_LUT[attn.data[rowStart(q) + k]]); lst.push([v, k]); }
    } else {
      for (let t = q; t < T; t++) { const v = value(t, q); attn.spans[t].style.background = rgb(BLUE_LUT[attn.data[rowStart(t) + q]]); lst.push([v, t]); }
    }
    lst.sort((a, b) => b[0] - a[0]);
    top.textContent = (attn.mode === "to" ? "token " + q + " attends most to: " : "token " + q + " is attended most by: ") +
      lst.slice(0, 5).map((x) => x[1] + " " + JSON.stringify(tokenText(x[1])) + " " + fmt(x[0])).join(", ");
    $("attn-sel").textContent = "query " + q + " " + JSON.stringify(tokenText(q));
  }

  /* the pinned query's row, every key: the values a test compares with the run file */
  function renderRow() {
    const tb = $("attn-row");
    tb.textContent = "";
    const q = attn.pinned;
    tb.dataset.layer = attn.layer; tb.dataset.head = attn.head;
    if (q === null) { tb.removeAttribute("data-query"); return; }
    tb.dataset.query = q;
    const hr = el("tr"); hr.appendChild(el("th", {}, "key")); hr.appendChild(el("th", {}, "token")); hr.appendChild(el("th", {}, "weight"));
    tb.appendChild(hr);
    for (let k = 0; k <= q; k++) {
      const v = value(q, k);
      const tr = el("tr", { "data-k": k, "data-v": v.toPrecision(7) });
      tr.appendChild(el("td", {}, String(k)));
      tr.appendChild(el("td", {}, JSON.stringify(tokenText(k))));
      tr.appendChild(el("td", {}, fmt(v)));
      tb.appendChild(tr);
    }
    tb.parentElement.open = true;
  }

  /* ============================================================== activations */
  const ACTS = META.acts || [];
  const acts = { i: 0, v: null, spans: null };
  function setupActs() {
    const sel = $("acts-series");
    ACTS.forEach((a, i) => sel.appendChild(el("option", { value: i }, a.label)));
    const want = state.series;
    let i = 0;
    if (want !== undefined) { const j = ACTS.findIndex((a) => a.label === want); i = j >= 0 ? j : Math.min(Math.max(int(want, 0), 0), ACTS.length - 1); }
    sel.value = i;
    sel.onchange = () => selectSeries(int(sel.value));
    acts.spans = tokenSpans($("acts-tokens"));
    acts.spans.forEach((s, t) => {
      s.onmouseenter = (ev) => { showTip(ev, tokenLabel(t) + "\n" + ACTS[acts.i].label + " = " + fmt(acts.v[t])); $("acts-hover").textContent = "pos " + t + ": " + fmt(acts.v[t]); };
      s.onmouseleave = hideTip;
    });
    selectSeries(i);
    if (state.values !== undefined) {   /* every series' values, for tests and copying */
      const tb = $("acts-values");
      tb.hidden = false;
      ACTS.forEach((a) => {
        const v = f32(a.blob), tr = el("tr", { "data-series": a.label });
        tr.appendChild(el("th", {}, a.label));
        for (let t = 0; t < T; t++) tr.appendChild(el("td", { "data-v": isFinite(v[t]) ? v[t].toPrecision(7) : "nan" }, fmt(v[t])));
        tb.appendChild(tr);
      });
    }
  }
  function selectSeries(i) {
    acts.i = i;
    state.series = ACTS[i].label; writeHash();
    const a = ACTS[i], v = f32(a.blob);
    acts.v = v;
    const lo = a.min === null ? 0 : a.min, hi = a.max === null ? 0 : a.max;
    const signed = lo < 0 && hi > 0, m = Math.max(Math.abs(lo), Math.abs(hi));
    const colour = (x) => !isFinite(x) ? [238, 238, 238] : signed ? diverging(x, m) : sequential(x, lo, hi);
    const box = $("acts-tokens");
    box.dataset.series = a.label;
    acts.spans.forEach((s, t) => { s.style.background = rgb(colour(v[t])); s.dataset.v = isFinite(v[t]) ? v[t].toPrecision(7) : "nan"; });
    const leg = $("acts-legend");
    leg.textContent = "";
    const bar = el("span", { class: "bar" });
    const stops = [0, 0.25, 0.5, 0.75, 1].map((t) => rgb(colour(signed ? -m + 2 * m * t : lo + (hi - lo) * t)));
    bar.style.background = "linear-gradient(to right," + stops.join(",") + ")";
    leg.appendChild(el("span", {}, fmt(signed ? -m : lo)));
    leg.appendChild(bar);
    leg.appendChild(el("span", {}, fmt(signed ? m : hi)));
    drawSeries(v, signed ? -m : lo, signed ? m : hi);
  }
  function drawSeries(v, lo, hi) {
    const c = $("acts-plot"), ctx = c.getContext("2d"), W = c.width, H = c.height, pad = 24;
    ctx.clearRect(0, 0, W, H);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
    if (!(hi > lo)) { hi = lo + 1; }
    const x = (t) => pad + (W - 2 * pad) * (T > 1 ? t / (T - 1) : 0.5), y = (u) => H - pad - (H - 2 * pad) * (u - lo) / (hi - lo);
    ctx.strokeStyle = "#999"; ctx.beginPath(); ctx.moveTo(pad, y(Math.max(lo, Math.min(hi, 0)))); ctx.lineTo(W - pad, y(Math.max(lo, Math.min(hi, 0)))); ctx.stroke();
    ctx.strokeStyle = "#2563eb"; ctx.lineWidth = 1.5; ctx.beginPath();
    let pen = false;
    for (let t = 0; t < T; t++) {
      if (!isFinite(v[t])) { pen = false; continue; }
      if (pen) ctx.lineTo(x(t), y(v[t])); else ctx.moveTo(x(t), y(v[t]));
      pen = true;
    }
    ctx.stroke();
    ctx.fillStyle = "#333"; ctx.font = "11px sans-serif";
    ctx.fillText(fmt(hi), 2, pad - 6); ctx.fillText(fmt(lo), 2, H - 6); ctx.fillText("position →", W - 80, H - 6);
  }

  /* ================================================================= geometry */
  const G = META.geometry || [];
  const geom = { g: null, pts: null, view: null, drag: null };
  function setupGeom() {
    const ls = $("geom-layer"), hs = $("geom-head");
    const layers = [...new Set(G.map((g) => g.layer))];
    layers.forEach((l) => ls.appendChild(el("option", { value: l }, String(l))));
    const fill = (l) => {
      hs.textContent = "";
      G.filter((g) => g.layer === l).forEach((g) => hs.appendChild(el("option", { value: g.head }, String(g.head))));
    };
    let l = layers.includes(int(state.glayer, -1)) ? int(state.glayer) : layers[0];
    fill(l);
    ls.value = l;
    const heads = G.filter((g) => g.layer === l).map((g) => g.head);
    hs.value = heads.includes(int(state.ghead, -1)) ? int(state.ghead) : heads[0];
    ls.onchange = () => { fill(int(ls.value)); selectGeom(int(ls.value), int(hs.value)); };
    hs.onchange = () => selectGeom(int(ls.value), int(hs.value));
    const c = $("geom-plot");
    c.onwheel = (ev) => {
      ev.preventDefault();
      const [px, py] = toData(ev);
      const f = ev.deltaY < 0 ? 0.8 : 1.25, v = geom.view;
      geom.view = { x0: px + (v.x0 - px) * f, x1: px + (v.x1 - px) * f, y0: py + (v.y0 - py) * f, y1: py + (v.y1 - py) * f };
      drawGeom();
    };
    c.onmousedown = (ev) => { geom.drag = { x: ev.clientX, y: ev.clientY, v: { ...geom.view } }; };
    window.addEventListener("mouseup", () => { geom.drag = null; });
    c.onmousemove = (ev) => {
      if (geom.drag) {
        const r = c.getBoundingClientRect(), d = geom.drag, v = d.v;
        const dx = (ev.clientX - d.x) / r.width * (v.x1 - v.x0), dy = (ev.clientY - d.y) / r.height * (v.y1 - v.y0);
        geom.view = { x0: v.x0 - dx, x1: v.x1 - dx, y0: v.y0 + dy, y1: v.y1 + dy };
        return drawGeom();
      }
      const i = nearest(ev);
      if (i < 0) { hideTip(); $("geom-hover").textContent = ""; return; }
      const text = pointLabel(i);
      showTip(ev, text);
      $("geom-hover").textContent = text.replace(/\n/g, "; ");
    };
    c.onmouseleave = hideTip;
    c.ondblclick = () => { resetGeom(); drawGeom(); };
    $("geom-reset").onclick = () => { resetGeom(); drawGeom(); };
    selectGeom(l, int(hs.value));
  }
  function pointLabel(i) {
    const isK = i >= T, t = isK ? i - T : i, p = geom.pts;
    return (isK ? "key" : "query") + " at pos " + t + " " + JSON.stringify(tokenText(t)) + "\n(" + fmt(p[2 * i]) + ", " + fmt(p[2 * i + 1]) + ")";
  }
  function selectGeom(l, h) {
    geom.g = G.find((g) => g.layer === l && g.head === h);
    state.glayer = l; state.ghead = h; writeHash();
    geom.pts = f32(geom.g.blob);
    resetGeom();
    drawGeom();
    const r = geom.g.ratio;
    $("geom-info").textContent = "PCA of the pooled rotated q (" + T + ") and k (" + T + ") points of layer " + l + " head " + h +
      " (kv head " + geom.g.kv_head + "): PC1 " + (100 * r[0]).toFixed(1) + "%" + (r.length > 1 ? ", PC2 " + (100 * r[1]).toFixed(1) + "%" : "");
    const info = $("geom-info");
    info.dataset.points = geom.pts.length / 2; info.dataset.layer = l; info.dataset.head = h;
    if (state.points !== undefined) {   /* every point's coordinates, for tests and copying */
      const tb = $("geom-points");
      tb.hidden = false; tb.textContent = "";
      for (let i = 0; i < 2 * T; i++)
        tb.appendChild(el("tr", { "data-i": i, "data-x": geom.pts[2 * i].toPrecision(7), "data-y": geom.pts[2 * i + 1].toPrecision(7) }, pointLabel(i).replace("\n", " ")));
    }
  }
  function resetGeom() {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    const p = geom.pts;
    for (let i = 0; i < p.length; i += 2) { x0 = Math.min(x0, p[i]); x1 = Math.max(x1, p[i]); y0 = Math.min(y0, p[i + 1]); y1 = Math.max(y1, p[i + 1]); }
    const mx = (x1 - x0) * 0.06 || 1, my = (y1 - y0) * 0.06 || 1;
    geom.view = { x0: x0 - mx, x1: x1 + mx, y0: y0 - my, y1: y1 + my };
  }
  function toData(ev) {
    const c = $("geom-plot"), r = c.getBoundingClientRect(), v = geom.view;
    return [v.x0 + (ev.clientX - r.left) / r.width * (v.x1 - v.x0), v.y1 - (ev.clientY - r.top) / r.height * (v.y1 - v.y0)];
  }
  function toPx(x, y) {
    const c = $("geom-plot"), v = geom.view;
    return [(x - v.x0) / (v.x1 - v.x0) * c.width, (v.y1 - y) / (v.y1 - v.y0) * c.height];
  }
  function nearest(ev) {
    const c = $("geom-plot"), r = c.getBoundingClientRect();
    const mx = (ev.clientX - r.left) * c.width / r.width, my = (ev.clientY - r.top) * c.height / r.height;
    let best = -1, bd = 64;
    for (let i = 0; i < geom.pts.length / 2; i++) {
      const [x, y] = toPx(geom.pts[2 * i], geom.pts[2 * i + 1]);
      const d = (x - mx) * (x - mx) + (y - my) * (y - my);
      if (d < bd) { bd = d; best = i; }
    }
    return best;
  }
  function drawGeom() {
    const c = $("geom-plot"), ctx = c.getContext("2d"), p = geom.pts;
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, c.width, c.height);
    const [ox, oy] = toPx(0, 0);
    ctx.strokeStyle = "#ddd"; ctx.beginPath(); ctx.moveTo(ox, 0); ctx.lineTo(ox, c.height); ctx.moveTo(0, oy); ctx.lineTo(c.width, oy); ctx.stroke();
    const dot = (i, col, r) => { const [x, y] = toPx(p[2 * i], p[2 * i + 1]); ctx.fillStyle = col; ctx.beginPath(); ctx.arc(x, y, r, 0, 2 * Math.PI); ctx.fill(); return [x, y]; };
    for (let t = 0; t < T; t++) dot(t, "rgba(37,99,235,0.6)", 3);
    for (let t = 0; t < T; t++) dot(T + t, "rgba(234,88,12,0.6)", 3);
    ctx.strokeStyle = "#111"; ctx.lineWidth = 2;   /* the first token: the sink's key and its query */
    for (const i of [0, T]) { const [x, y] = dot(i, i ? "#ea580c" : "#2563eb", 6); ctx.beginPath(); ctx.arc(x, y, 6, 0, 2 * Math.PI); ctx.stroke(); }
    ctx.font = "12px sans-serif";
    ctx.fillStyle = "#2563eb"; ctx.fillText("● queries", 10, 18);
    ctx.fillStyle = "#ea580c"; ctx.fillText("● keys", 90, 18);
    ctx.fillStyle = "#111"; ctx.fillText("◯ first token", 150, 18);
    ctx.fillStyle = "#555"; ctx.fillText("PC1 →", c.width - 50, c.height - 8); ctx.fillText("PC2 ↑", 8, c.height - 8);
  }

  /* =================================================================== report */
  function setupReport() {
    const rows = META.rows, figs = META.figures, ev = META.evidence;
    const tb = $("report-table");
    const hr = el("tr");
    ["id", "claim", "verdict", "mean [lo, hi]", "seeds", "behind it"].forEach((h) => hr.appendChild(el("th", {}, h)));
    tb.appendChild(hr);
    rows.forEach((r, i) => {
      const tr = el("tr", { class: "vrow", id: "row-" + r.id, "data-id": r.id, "data-word": r.word });
      tr.appendChild(el("td", {}, r.id));
      tr.appendChild(el("td", {}, r.claim));
      const w = el("td"); w.appendChild(el("span", { class: "word " + r.word.replace(/ /g, "_") }, r.word)); if (r.reason) w.appendChild(el("div", { class: "note" }, r.reason));
      tr.appendChild(w);
      tr.appendChild(el("td", {}, r.mean === "" ? "–" : r.mean + " [" + r.lo + ", " + r.hi + "]"));
      tr.appendChild(el("td", {}, r.n_seeds));
      const links = el("td");
      const a = el("a", { href: "#view=report&row=" + encodeURIComponent(r.id), class: "numbers" }, "numbers");
      links.appendChild(a);
      r.figures.forEach((f) => { links.appendChild(document.createTextNode(" · ")); links.appendChild(el("a", { href: "#view=report&row=" + encodeURIComponent(r.id) + "&fig=" + f, class: "figlink", "data-fig": figs[f].name }, figs[f].name)); });
      tr.appendChild(links);
      tr.onclick = (e) => { if (e.target.tagName !== "A") { state.row = r.id; writeHash(); showRow(r.id); } };
      tb.appendChild(tr);
    });
    window.addEventListener("hashchange", () => { Object.assign(state, readHash()); if (state.row) showRow(state.row); });
    /* the gallery and the evidence table */
    const fb = $("report-figures");
    figs.forEach((f, i) => fb.appendChild(figureEl(i, "fig-" + i)));
    const et = $("report-evidence");
    const eh = el("tr"); ["file", "dataset", "shape", "values"].forEach((h) => eh.appendChild(el("th", {}, h))); et.appendChild(eh);
    ev.forEach((d, i) => {
      const tr = el("tr", { id: "ev-" + i });
      tr.appendChild(el("td", {}, d.file)); tr.appendChild(el("td", { style: "text-align:left" }, d.path));
      tr.appendChild(el("td", {}, "[" + d.shape.join(", ") + "]"));
      tr.appendChild(el("td", { style: "text-align:left" }, d.values ? d.values.map(fmt).join(", ") : ""));
      et.appendChild(tr);
    });
    if (META.report) $("report-text").textContent = META.report; else $("report-text-box").hidden = true;
    showRow(state.row && rows.some((r) => r.id === state.row) ? state.row : rows[0].id);
    return Promise.all(pendingImages);
  }
  const pendingImages = [];   /* the page is ready once its figures are decoded */
  function figureEl(i, id) {
    const f = META.figures[i];
    const fig = el("figure", id ? { id: id } : {});
    const img = el("img", { alt: f.name, "data-name": f.name });
    img.src = "data:image/png;base64," + $("b-" + f.blob).textContent;
    pendingImages.push(img.decode().then(() => { img.dataset.loaded = img.naturalWidth + "x" + img.naturalHeight; },
                                         () => { img.dataset.loaded = "error"; }));
    fig.appendChild(img);
    fig.appendChild(el("figcaption", {}, f.name));
    return fig;
  }
  const nums = (s) => s === "" ? [] : s.split(",").map(Number);
  function showRow(id) {
    const r = META.rows.find((x) => x.id === id);
    if (!r) return;
    for (const tr of document.querySelectorAll("tr.vrow")) tr.classList.toggle("on", tr.dataset.id === id);
    const d = $("report-detail");
    d.textContent = "";
    d.dataset.row = id;
    d.appendChild(el("h2", {}, r.id + ": " + r.claim));
    d.appendChild(seedPlot(r));
    const dl = el("dl");
    for (const k of ["word", "reason", "statistic", "unit", "seeds", "seed_values", "mean", "lo", "hi", "control", "control_values", "ours", "rule", "describe", "paper", "source"]) {
      if (r[k] === "") continue;
      dl.appendChild(el("dt", {}, k.replace("_", " ")));
      dl.appendChild(el("dd", { "data-key": k }, r[k]));
    }
    d.appendChild(dl);
    if (r.evidence.length) {
      d.appendChild(el("h2", {}, "Evidence (the folder's .h5 files)"));
      const t = el("table", { class: "nums" });
      r.evidence.forEach((j) => {
        const e = META.evidence[j], tr = el("tr", { "data-ev": j });
        tr.appendChild(el("td", { style: "text-align:left" }, e.file + ":" + e.path));
        tr.appendChild(el("td", {}, "[" + e.shape.join(", ") + "]"));
        tr.appendChild(el("td", { style: "text-align:left" }, e.values ? e.values.map(fmt).join(", ") : ""));
        t.appendChild(tr);
      });
      d.appendChild(t);
    }
    if (r.figures.length) {
      d.appendChild(el("h2", {}, "Figures"));
      r.figures.forEach((i) => d.appendChild(figureEl(i)));
    }
  }
  /* per-seed values (dots), the mean and its interval (bar), the control (hollow dots) */
  function seedPlot(r) {
    const ns = "http://www.w3.org/2000/svg";
    const s = document.createElementNS(ns, "svg");
    s.setAttribute("width", 520); s.setAttribute("height", 70); s.setAttribute("class", "seedplot");
    const vals = nums(r.seed_values), ctl = nums(r.control_values), mean = parseFloat(r.mean), lo = parseFloat(r.lo), hi = parseFloat(r.hi);
    const all = vals.concat(ctl, [mean, lo, hi]).filter(isFinite);
    if (!all.length) return s;
    let a = Math.min(...all), b = Math.max(...all);
    if (b === a) { a -= 1; b += 1; }
    const pad = (b - a) * 0.08, x = (v) => 20 + 480 * (v - a + pad) / (b - a + 2 * pad);
    const add = (tag, at) => { const e = document.createElementNS(ns, tag); for (const k in at) e.setAttribute(k, at[k]); s.appendChild(e); return e; };
    add("line", { x1: 20, x2: 500, y1: 50, y2: 50, stroke: "#bbb" });
    if (isFinite(lo) && isFinite(hi)) add("rect", { x: x(lo), y: 22, width: Math.max(1, x(hi) - x(lo)), height: 16, fill: "#bfdbfe" });
    if (isFinite(mean)) add("line", { x1: x(mean), x2: x(mean), y1: 18, y2: 42, stroke: "#1d4ed8", "stroke-width": 2 });
    vals.forEach((v) => isFinite(v) && add("circle", { cx: x(v), cy: 30, r: 4, fill: "#111", class: "seed" }));
    ctl.forEach((v) => isFinite(v) && add("circle", { cx: x(v), cy: 30, r: 4, fill: "none", stroke: "#dc2626", class: "control" }));
    const tx = (v, y) => { const t = add("text", { x: x(v), y: y, "font-size": 10, "text-anchor": "middle", fill: "#555" }); t.textContent = fmt(v); };
    tx(a + 0, 64); tx(b, 64);
    const lg = add("text", { x: 20, y: 12, "font-size": 11, fill: "#333" });
    lg.textContent = "● per seed   ○ control   ▮ mean and interval";
    return s;
  }

  /* ====================================================================== tabs */
  const views = [];
  if (META.attention) views.push(["attn", "Attention", setupAttention]);
  if (ACTS.length) views.push(["acts", "Token activations", setupActs]);
  if (G.length) views.push(["geom", "Q/K geometry", setupGeom]);
  if (META.kind === "report") views.push(["report", "Probe report", setupReport]);
  const ready = new Set();
  async function show(name) {
    const v = views.find((x) => x[0] === name) || views[0];
    state.view = v[0]; writeHash();
    for (const x of views) { $("v-" + x[0]).hidden = x[0] !== v[0]; $("tab-" + x[0]).classList.toggle("on", x[0] === v[0]); }
    if (!ready.has(v[0])) { ready.add(v[0]); await v[2](); }
    if (v[0] === "attn") await selectHead(attn.layer, attn.head);
  }
  async function bench(n) {   /* bench=N: switch through N heads, record each switch's time */
    const times = [];
    for (let i = 1; i <= n; i++) {
      const li = i % A.layers.length, h = (i * 7) % A.heads;
      await selectHead(A.layers[li], h);
      times.push(perf.switch_ms);
    }
    times.sort((a, b) => a - b);
    const p = $("perf");
    p.dataset.benchN = n;
    p.dataset.benchMedianMs = times[Math.floor(n / 2)].toFixed(2);
    p.dataset.benchMaxMs = times[n - 1].toFixed(2);
    /* the data blocks leave the DOM, so that a --dump-dom of a large page stays small */
    for (const b of document.querySelectorAll("script[type='application/octet-stream']")) b.remove();
  }

  async function main() {
    document.title = META.title;
    $("title").textContent = META.title + (META.kind === "run" ? "  ·  " + T + " tokens" + (META.model && META.model.n_layer ? ", " + META.model.n_layer + " layers" : "") : "");
    const nav = $("tabs");
    for (const [name, label] of views) {
      const b = el("button", { id: "tab-" + name, type: "button" }, label);
      b.onclick = () => show(name);
      nav.appendChild(b);
    }
    if (!views.length) { $("status").textContent = "nothing to show"; return; }
    await show(state.view);
    const p = $("perf");
    perf.ready_ms = performance.now();
    p.dataset.readyMs = perf.ready_ms.toFixed(2);            /* from navigation start: parsing included */
    p.dataset.scriptMs = (perf.ready_ms - perf.start).toFixed(2);
    if (state.bench && A) await bench(int(state.bench, 10));
    $("status").textContent = "ready";
    document.body.dataset.ready = "1";
  }
  main();
})();

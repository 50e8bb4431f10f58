-- view.lua — `mechprobe view`: an interactive, self-contained HTML page
-- (docs/VIEW.md) of a run file (attention patterns, token activations, Q/K
-- geometry) or of a probe's results folder (the verdict table, each row
-- linked to its figures and numbers). One file, no network at view time.
--
--   mechprobe view RUN.h5 --out DIR/index.html [--model FILE [--tokenizer FILE] | --ids]
--                 [--layers 0,2] [--batch N] [--acts loss,logit:ID,norm:HOOK,HOOK:UNIT,HOOK:HEAD.UNIT]
--                 [--direction HOOK=FILE] [--no-attention] [--no-geometry] [--title T] [--max-mb N]
--   mechprobe view RESULTS_DIR --out DIR/report.html [--title T]
--
-- The run file holds token ids; the page shows their text when a tokenizer
-- can be had: --model/--tokenizer, else the model the run names in /model
-- (attribute source) when that file is still there, else the ids (--ids: always).
local cli = require "cli"

-- the one positional argument (the run file or results folder), anywhere
-- outside an option's value
local FLAGS = {ids = true, no_attention = true, no_geometry = true, help = true, h = true}
local argv, input, i = {}, nil, 1
while arg[i] do
  local a = arg[i]
  local name = a:match("^%-%-?([%w_%-]+)$")
  if name then
    argv[#argv + 1] = a
    if not FLAGS[name:gsub("-", "_")] and arg[i + 1] then argv[#argv + 1] = arg[i + 1]; i = i + 1 end
  elseif a:match("^%-") or input then
    argv[#argv + 1] = a   -- --name=value, or a second positional (cli.parse reports it)
  else
    input = a
  end
  i = i + 1
end
local o = cli.parse(argv, {
  name = "view",
  summary = "mechprobe view RUN.h5|RESULTS_DIR --out FILE.html [options]: an interactive, self-contained HTML page\n"
    .. "of a run file (attention, token activations, Q/K geometry) or of a probe's results folder (docs/VIEW.md).",
  {"out", "FILE.html", "the page (written atomically; its folder is made when missing)", required = true},
  {"title", "T", "page title (default: the input's name)"},
  {"model", "FILE", "decode the tokens with this model's tokenizer"},
  {"tokenizer", "FILE", "tokenizer file for --model"},
  {"ids", nil, "show token ids, decode nothing"},
  {"layers", "LIST", "layers of the attention and geometry views, e.g. 0,3 (default: all captured)"},
  {"batch", "N", "row of the run's batch to show (0-based)", default = 0, type = "int"},
  {"acts", "LIST", "per-token series: loss, logit:ID, norm:HOOK, HOOK:UNIT, HOOK:HEAD.UNIT, defaults "
                   .. "(default: loss, and the norm of each captured hook_resid_post)"},
  {"direction", "HOOK=FILE", "one more series: the dot product of HOOK's vectors with FILE's numbers"},
  {"no_attention", nil, "leave the attention view out"},
  {"no_geometry", nil, "leave the Q/K geometry view out"},
  {"max_mb", "N", "refuse a page larger than this", default = 1024, type = "int", min = 1, max = 1 << 20},
})
if not input then cli.fail("view", "give the run file (.h5) or the results folder to show") end
mp.check_output(o.out, input)
local out_dir = o.out:match("^(.*)/[^/]*$")   -- --out DIR/index.html: DIR is made when missing
if out_dir and out_dir ~= "" then mp.mkdir(out_dir) end

local function is_dir(path)   -- reading a folder fails with EISDIR
  local f = io.open(path, "r")
  if not f then return false end
  local _, _, code = f:read(1)
  f:close()
  return code == 21
end

local t0 = os.clock()
if is_dir(input) then
  for _, k in ipairs{"model", "tokenizer", "ids", "layers", "acts", "direction", "no_attention", "no_geometry"} do
    if o[k] then cli.fail("view", ("--%s is for run files; %s is a results folder"):format(k:gsub("_", "-"), input)) end
  end
  local s = mp.view.report(input, {out = o.out, title = o.title})
  print(("wrote %s: %d verdict rows, %d figures, %.1f MiB (%.2f s)"):format(o.out, s.rows, s.figures,
    s.bytes / 1048576, os.clock() - t0))
  return
end

-- token text
local tokens
if not o.ids then
  local f = mp.h5.open(input)
  local ids = f:has("tokens") and f:read_int("tokens")[o.batch + 1]   -- else mp.view.run says what is wrong
  local attrs = f:has("model") and f:attrs("model") or {}
  f:close()
  local model_file = o.model or attrs.source
  if o.tokenizer and not o.model then cli.fail("view", "--tokenizer needs --model") end
  if ids and model_file and model_file ~= "" then
    local ok, m = pcall(mp.load, model_file, {tokenizer = o.tokenizer})
    if ok then
      tokens = m:to_str_tokens(ids)
      m:close()
    elseif o.model then
      error(m, 0)
    else
      io.stderr:write(("mechprobe view: showing token ids (the run's model %s cannot be loaded; give --model)\n")
        :format(model_file))
    end
  end
  if tokens and #tokens ~= #ids then tokens = nil end
end

local acts
if o.acts or o.direction then
  acts = o.acts and {} or {"defaults"}   -- --direction alone: after the default series
  if o.acts then
    for spec in o.acts:gmatch("[^,]+") do acts[#acts + 1] = spec:match("^%s*(.-)%s*$") end
  end
  if o.direction then
    local hook, file = o.direction:match("^([^=]+)=(.+)$")
    if not hook then cli.fail("view", ("--direction must be HOOK=FILE (got '%s')"):format(o.direction)) end
    local text = mp.read_file(file, {what = "--direction", max_bytes = 64 << 20})
    local v = {}
    for x in text:gmatch("[^%s,]+") do
      local n = tonumber(x)
      if not n or n ~= n or n == math.huge or n == -math.huge then
        cli.fail("view", ("--direction: %s: '%s' is not a finite number"):format(file, x))
      end
      v[#v + 1] = n
    end
    if #v == 0 then cli.fail("view", ("--direction: %s holds no numbers"):format(file)) end
    acts[#acts + 1] = {hook = hook, direction = v, label = hook .. " . " .. file}
  end
end

local s = mp.view.run(input, {
  out = o.out, title = o.title, batch = o.batch, tokens = tokens, acts = acts, max_mb = o.max_mb,
  layers = o.layers and cli.int_list(o.layers, "--layers", 0, 1 << 20) or nil,
  attention = not o.no_attention and nil, geometry = not o.no_geometry and nil,   -- false: left out; nil: when captured
})
print(("wrote %s: %d tokens, attention %d layers x %d heads, %d series, %d q/k clouds, %.1f MiB (%.2f s)"):format(
  o.out, s.T, s.layers, s.heads, s.acts, s.geometry, s.bytes / 1048576, s.seconds))

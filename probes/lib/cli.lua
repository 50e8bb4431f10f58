-- cli.lua — a small GNU-style option parser for probe scripts.
--
--   local cli = require "cli"
--   local opts = cli.parse(arg, {
--     name = "capture", summary = "one line",
--     {"model", "FILE", "model checkpoint (llama2.c .bin)", required = true},
--     {"steps", "N", "number of steps", default = 64, type = "int"},   -- 0..2^31-1 unless min/max
--     {"lr", "X", "learning rate", type = "number", min = 0},         -- finite; min/max when given
--     {"logits", nil, "also store the logits"},          -- a flag
--   })
--
-- Options are written --name VALUE or --name=VALUE (dashes and underscores are
-- interchangeable in names); flags take no value. --help prints the usage.
-- Mistakes print a clear message and the usage on stderr and exit with 2.
-- cli.preset(base, presets, name) gives a probe's settings: base, then the
-- named preset over it, plus preset = name. cli.write_text(path, text) writes a
-- probe's text output (report.txt, a .tsv) atomically through mp.output, like
-- every other file mechprobe writes.
--
-- The checks every probe's preamble makes, each printing "mechprobe NAME: ..."
-- on stderr and exiting with 2 (code for cli.fail):
--   cli.fail(name, msg [, code])         any message
--   cli.check_format(name, fmt)          --format is png, svg or pdf
--   cli.check_choice(name, o, keys, n)   at most (n = "at most") or exactly
--                                        (n = "exactly") one of the flags
--   cli.budget(name, o)                  "quick", "medium" or "full" from
--                                        --quick / --medium (at most one)
--   cli.check_train_device(name, o)      --device cpu|cuda of a probe that trains (fp32)
--   cli.check_device(name, o)            --device cpu|cuda and --precision
--                                        fp32|bf16 (cli.DEVICE_OPTS in the spec):
--                                        values, and a CUDA device at once (exit 1
--                                        without one, before anything is read or
--                                        written); returns mp.load's options
local cli = {}

function cli.fail(name, msg, code)
  io.stderr:write(("mechprobe %s: %s\n"):format(name, msg))
  os.exit(code or 2)
end

function cli.check_format(name, fmt)
  if not ({png = true, svg = true, pdf = true})[fmt] then
    cli.fail(name, ("--format must be png, svg or pdf (got '%s')"):format(tostring(fmt)))
  end
end

function cli.check_choice(name, o, keys, how)
  local given, flags = 0, {}
  for i, k in ipairs(keys) do
    if o[k] ~= nil and o[k] ~= false then given = given + 1 end
    flags[i] = "--" .. k:gsub("_", "-")
  end
  if given > 1 or (how == "exactly" and given == 0) then
    local list = #flags > 1 and table.concat(flags, ", ", 1, #flags - 1) .. " and " .. flags[#flags] or flags[1]
    cli.fail(name, ("give %s one of %s"):format(how, list))
  end
end

-- The spec entries of --device and --precision (probes that run a forward pass).
cli.DEVICE_OPTS = {
  {"device", "DEV", "where the forward runs: cpu, or cuda (an NVIDIA GPU)", default = "cpu"},
  {"precision", "P", "fp32, or bf16 (device cuda; or cpu with BF16 weights and AVX-512 BF16)", default = "fp32"},
}

function cli.check_device(name, o)
  if o.device ~= "cpu" and o.device ~= "cuda" then
    cli.fail(name, ("--device must be cpu or cuda (got '%s')"):format(tostring(o.device)))
  end
  if o.precision ~= "fp32" and o.precision ~= "bf16" then
    cli.fail(name, ("--precision must be fp32 or bf16 (got '%s')"):format(tostring(o.precision)))
  end
  if o.device == "cuda" then
    local ok, why = mp.cuda.available()
    if not ok then cli.fail(name, why, 1) end
  end
  return {device = o.device, precision = o.precision}
end

-- The spec entry of --device for probes that train (training on the GPU runs in fp32).
cli.TRAIN_DEVICE_OPT = {"device", "DEV", "where the models train and run: cpu, or cuda (an NVIDIA GPU, fp32)",
                        default = "cpu"}

-- Checks a training probe's --device (cpu or cuda, and a CUDA device at once:
-- exit 1 naming the reason); returns it.
function cli.check_train_device(name, o)
  if o.device ~= "cpu" and o.device ~= "cuda" then
    cli.fail(name, ("--device must be cpu or cuda (got '%s')"):format(tostring(o.device)))
  end
  if o.device == "cuda" then
    local ok, why = mp.cuda.available()
    if not ok then cli.fail(name, why, 1) end
  end
  return o.device
end

function cli.budget(name, o)
  cli.check_choice(name, o, {"quick", "medium"}, "at most")
  return o.quick and "quick" or o.medium and "medium" or "full"
end

function cli.preset(base, presets, name)
  local p = assert(presets[name], "unknown preset " .. tostring(name))
  local o = {preset = name}
  for k, v in pairs(base) do o[k] = v end
  for k, v in pairs(p) do o[k] = v end
  return o
end

local function usage(spec)
  local lines = {("usage: mechprobe %s [options]"):format(spec.name)}
  if spec.summary then lines[#lines + 1] = spec.summary end
  lines[#lines + 1] = "options:"
  for _, o in ipairs(spec) do
    local left = "--" .. o[1]:gsub("_", "-") .. (o[2] and (" " .. o[2]) or "")
    local right = o[3] or ""
    if o.required then right = right .. " (required)" end
    -- an empty default, or help text that already says what the default means,
    -- gets no "(default ...)" of its own
    if o.default ~= nil and o.default ~= "" and not right:find("(default", 1, true) then
      right = right .. (" (default %s)"):format(tostring(o.default))
    end
    lines[#lines + 1] = ("  %-26s %s"):format(left, right)
  end
  lines[#lines + 1] = ("  %-26s %s"):format("--help", "show this help")
  return table.concat(lines, "\n") .. "\n"
end

local function fail(spec, msg)
  io.stderr:write(("mechprobe %s: %s\n\n%s"):format(spec.name, msg, usage(spec)))
  os.exit(2)
end

-- The range of an option of type "int" without min/max: a count, size, step or
-- seed (a larger or negative value is a mistake, or would wrap further on).
cli.INT_MIN, cli.INT_MAX = 0, 2147483647

-- Checks a numeric option's text: an int is decimal digits only (a hex
-- "0x8000000000000000" would wrap to a negative integer) within
-- [o.min or 0, o.max or 2^31-1]; a number is finite (no nan, inf or 1e999)
-- within [o.min, o.max] when given. Returns the value.
function cli.check_number(spec, name, o, val)
  local n = tonumber(val)
  if o.type == "int" then
    if not tostring(val):match("^%s*[+-]?%d+%s*$") or not n then
      fail(spec, ("option --%s: an integer expected, got '%s'"):format(name, val))
    end
  elseif not n then
    fail(spec, ("option --%s: a number expected, got '%s'"):format(name, val))
  end
  if n ~= n or n == math.huge or n == -math.huge then
    fail(spec, ("option --%s: a finite number expected, got '%s'"):format(name, val))
  end
  local lo, hi = o.min, o.max
  if o.type == "int" then lo, hi = lo or cli.INT_MIN, hi or cli.INT_MAX end
  if math.type(n) == "float" and o.type == "int" then  -- decimal digits beyond the 64-bit integers
    fail(spec, ("option --%s = %s is out of range (%d..%d)"):format(name, val, lo, hi))
  end
  if (lo and n < lo) or (hi and n > hi) then
    fail(spec, ("option --%s = %s is out of range (%s..%s)"):format(name, val, lo and tostring(lo) or "",
      hi and tostring(hi) or ""))
  end
  return n
end

function cli.parse(argv, spec)
  local byname, opts = {}, {}
  for _, o in ipairs(spec) do
    byname[o[1]:gsub("-", "_")] = o
    if o.default ~= nil then opts[o[1]] = o.default end
  end
  local i = 1
  while argv[i] do
    local a = argv[i]
    if a == "--help" or a == "-h" then io.stdout:write(usage(spec)); os.exit(0) end
    local name, val = a:match("^%-%-([%w_%-]+)=(.*)$")
    if not name then name = a:match("^%-%-([%w_%-]+)$") end
    if not name then fail(spec, ("unexpected argument '%s'"):format(a)) end
    local key = name:gsub("-", "_")
    local o = byname[key]
    if not o then fail(spec, ("unknown option '--%s'"):format(name)) end
    if o[2] == nil then
      if val ~= nil then fail(spec, ("option --%s takes no value"):format(name)) end
      opts[o[1]] = true
    else
      if val == nil then
        i = i + 1
        val = argv[i]
        if val == nil then fail(spec, ("option --%s needs a value (%s)"):format(name, o[2])) end
      end
      if o.type == "int" or o.type == "number" then
        val = cli.check_number(spec, name, o, val)
      end
      opts[o[1]] = val
    end
    i = i + 1
  end
  for _, o in ipairs(spec) do
    if o.required and opts[o[1]] == nil then fail(spec, ("--%s is required"):format(o[1]:gsub("_", "-"))) end
  end
  return opts
end

-- "1,2,3" -> {1, 2, 3}; errors name the option.
-- Items are decimal integers (a hex item could wrap) within lo..hi when given.
function cli.int_list(s, what, lo, hi)
  local t = {}
  for item in tostring(s):gmatch("[^,]+") do
    local n = tonumber(item)
    if not n or math.type(n) ~= "integer" or not item:match("^%s*[+-]?%d+%s*$") then
      io.stderr:write(("mechprobe: %s: '%s' is not an integer\n"):format(what, item))
      os.exit(2)
    end
    if (lo and n < lo) or (hi and n > hi) then
      io.stderr:write(("mechprobe: %s: %s is out of range (%d..%d)\n"):format(what, item, lo or math.mininteger,
        hi or math.maxinteger))
      os.exit(2)
    end
    t[#t + 1] = n
  end
  if #t == 0 then io.stderr:write(("mechprobe: %s: empty list\n"):format(what)); os.exit(2) end
  return t
end

-- A --seeds list: integers, none twice (a repeated seed would count one run as
-- two independent replicates in every interval).
function cli.seed_list(name, s)
  local seeds, seen = cli.int_list(s, "--seeds", cli.INT_MIN, cli.INT_MAX), {}
  for _, v in ipairs(seeds) do
    if seen[v] then cli.fail(name, ("--seeds: seed %d given twice"):format(v)) end
    seen[v] = true
  end
  return seeds
end

function cli.write_text(path, text)
  local out <close> = mp.output(path)   -- refuses non-regular destinations; temporary removed on error
  local f = assert(io.open(out.tmp, "w"))
  local ok, err = f:write(text)
  local closed, cerr = f:close()
  if not ok or not closed then error(("%s: cannot write: %s"):format(path, tostring(err or cerr)), 2) end
  out:commit()
end

return cli

-- h5trust_hostile.lua — corrupted HDF5 files opened with mp.h5.open (files from
-- tests/h5trust_gen.c in ./h5trust: byte overwrites over the metadata of a small
-- run-like file in HDF5's earliest format and in the 1.8 format, fields after
-- B-tree / heap / symbol-node signatures, truncations). Each file is opened and
-- walked the way a script would (list, has, attrs, shape, read, read_int): the
-- process must survive every one (libhdf5 crashes or loops on some in-process),
-- every failure must be a Lua error naming the file, and most must fail.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local dir = "h5trust"

local function fmt(v)
  if type(v) == "table" then
    local parts = {}
    for i = 1, #v do parts[i] = fmt(v[i]) end
    return "{" .. table.concat(parts, ",") .. "}"
  elseif type(v) == "number" then return ("%.9g"):format(v) end
  return tostring(v)
end

local function walk(f, g, out)
  local at = f:attrs(g)
  local keys = {}
  for k in pairs(at) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do out[#out + 1] = g .. "@" .. k .. "=" .. fmt(at[k]) end
  for _, name in ipairs(f:list(g)) do
    local p = (g == "/" and "" or g) .. "/" .. name
    local has, kind = f:has(p)
    out[#out + 1] = p .. ":" .. tostring(kind)
    if kind == "group" then walk(f, p, out)
    elseif kind == "dataset" then
      local v = f:read(p)
      out[#out + 1] = fmt(f:shape(p)) .. " " .. fmt(type(v) == "number" and v or v:totable())
      out[#out + 1] = fmt(f:read_int(p))
      local at2 = f:attrs(p)
      for k, x in pairs(at2) do out[#out + 1] = p .. "@" .. k .. "=" .. fmt(x) end
    end
  end
end

local function snapshot(path)
  local f <close> = mp.h5.open(path)
  local out = {}
  walk(f, "/", out)
  return table.concat(out, "\n")
end

local refs = {snapshot(dir .. "/base_old.h5"), snapshot(dir .. "/base_new.h5")}
t.ok(refs[1] == refs[2] and #refs[1] > 200, "the two base files read the same")

local files = {}
local p = io.popen("ls " .. dir .. "/hostile_*.h5")
for line in p:lines() do files[#files + 1] = line end
p:close()
t.ok(#files >= 30, ("at least 30 hostile files (got %d)"):format(#files))

local n_err, n_same, n_diff, n_crash, n_time = 0, 0, 0, 0, 0
for _, path in ipairs(files) do
  local ok, res = pcall(snapshot, path)
  if ok then
    if res == refs[1] then n_same = n_same + 1 else n_diff = n_diff + 1 end
  else
    local msg = tostring(res)
    n_err = n_err + 1
    if msg:find("crashed", 1, true) then n_crash = n_crash + 1 end
    if msg:find("timed out", 1, true) then
      n_time = n_time + 1
      t.ok(msg:find("timed out after 2 s", 1, true), "the limit is MECHPROBE_LOAD_TIMEOUT (2 s here): " .. msg)
    end
    t.ok(msg:find(path, 1, true), "the error names the file: " .. msg)
  end
end
io.write(("%d hostile files: %d refused with an error (%d where libhdf5 crashed in the check, %d timed out), "
          .. "%d read unchanged, %d read with changed values (no checksums in the old format)\n"):format(
          #files, n_err, n_crash, n_time, n_same, n_diff))
t.ok(n_err >= 30, ("at least 30 of the files are refused (got %d)"):format(n_err))
t.finish("h5trust_hostile")

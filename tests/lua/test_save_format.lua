-- test_save_format.lua — m:save with an explicit format writes that format
-- whatever the path ends in (io/model_io.c decides): before, format = "h5" on a
-- ".bin" path wrote a llama2.c file and format = "llama2c" on a ".h5" path a
-- checkpoint. The file's first bytes say what was written.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local dir = os.tmpname()
os.remove(dir)
mp.mkdir(dir)
local function head(path, n)
  local f = assert(io.open(path, "rb"))
  local s = f:read(n)
  f:close()
  return s
end
local m = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, vocab = 32, ctx = 16, seed = 2}
m:save(dir .. "/ckpt.bin", {format = "h5"})
t.ok(head(dir .. "/ckpt.bin", 4) == "\137HDF", "format h5 on a .bin path writes HDF5")
m:save(dir .. "/model.h5", {format = "llama2c"})
t.ok(head(dir .. "/model.h5", 4) ~= "\137HDF", "format llama2c on a .h5 path writes llama2.c")
local r = mp.load(dir .. "/model.h5")
t.ok(r.config.format == "llama2c-v0" or tostring(r):find("llama2c", 1, true), "it loads as llama2.c: " .. tostring(r))
m:save(dir .. "/g.h5", {format = "gguf"})
t.ok(head(dir .. "/g.h5", 4) == "GGUF", "format gguf on a .h5 path writes GGUF")
-- without a format the path decides, as before
m:save(dir .. "/plain.h5")
t.ok(head(dir .. "/plain.h5", 4) == "\137HDF", ".h5 path: checkpoint")
for _, f in ipairs{"ckpt.bin", "model.h5", "g.h5", "plain.h5"} do os.remove(dir .. "/" .. f) end
os.remove(dir)
t.finish("test_save_format")

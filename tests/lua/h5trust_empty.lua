-- h5trust_empty.lua — an empty dataset of shape {2^52, 0} (h5trust/empty.h5):
-- read_int would build 2^52 empty tables and read as many; every reader must
-- refuse it at once, naming the file and the dataset, while a small empty
-- dataset ({3, 0}) still reads as three empty tables.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, expect_error, deep_eq = t.case, t.expect_error, t.deep_eq
local path = "h5trust/empty.h5"

check("an empty dataset with a 2^52 extent is refused", function()
  local f <close> = mp.h5.open(path)
  local t0 = os.clock()
  expect_error(function() f:read_int("/e") end, path .. ": /e: empty dataset", "read_int")
  expect_error(function() f:read("/e") end, path .. ": /e: empty dataset", "read")
  expect_error(function() f:shape("/e") end, path .. ": /e: empty dataset", "shape")
  assert(os.clock() - t0 < 5, "refused at once")
  deep_eq(f:read_int("/ok"), {{}, {}, {}})
end)

t.finish("h5trust_empty")

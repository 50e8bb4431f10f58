-- h5trust_int32.lua — f:read_int on integers outside int32's range
-- (h5trust/ints.h5): int64 3000000000, big-endian int64 -3000000000, uint32
-- 4000000000, float64 1e10 must each be an error naming the file, the dataset
-- and the value (HDF5's conversion would clamp them); int32's own limits
-- stored as int64 read exactly.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, expect_error, deep_eq = t.case, t.expect_error, t.deep_eq
local path = "h5trust/ints.h5"

check("values outside int32 are errors, not clamped", function()
  local f <close> = mp.h5.open(path)
  expect_error(function() f:read_int("/i64") end, path .. ": /i64: value 3000000000 (element 1) is outside int32's range", "i64")
  expect_error(function() f:read_int("/i64neg") end, path .. ": /i64neg: value -3000000000 (element 2)", "i64neg")
  expect_error(function() f:read_int("/u32") end, path .. ": /u32: value 4000000000 (element 1)", "u32")
  expect_error(function() f:read_int("/f64") end, path .. ": /f64: value 1e+10 (element 1)", "f64")
  deep_eq(f:read_int("/i64ok"), {1, 2147483647, -2147483648})
  deep_eq(f:read("/u32"):totable(), {1, 4000000000})
end)

t.finish("h5trust_int32")

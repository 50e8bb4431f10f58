-- h5trust_sizes.lua — declared sizes the file does not hold (tests/h5trust_gen.c,
-- h5trust/sizes.h5, a few kB): /big declares 2^28 float32 (1 GiB), /bigint 2^30
-- int32 (4 GiB), never written; /bigchunk 2^30 float32 in deflated chunks of
-- which one was written. f:read and f:read_int must refuse them before
-- allocating, naming the file and the dataset; the shape stays readable.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, expect_error, deep_eq = t.case, t.expect_error, t.deep_eq
local path = "h5trust/sizes.h5"

check("declared 1 GiB and 4 GiB in a small file are refused", function()
  local f <close> = mp.h5.open(path)
  deep_eq(f:shape("/big"), {268435456})
  expect_error(function() f:read("/big") end, path .. ": /big: declares 268435456 values", "read /big")
  expect_error(function() f:read("/big") end, "the file holds only 0 bytes", "read /big")
  expect_error(function() f:read_int("/big") end, path .. ": /big: declares", "read_int /big")
  expect_error(function() f:read_int("/bigint") end, path .. ": /bigint: declares 1073741824 values", "read_int /bigint")
  expect_error(function() f:read("/bigchunk") end, path .. ": /bigchunk: declares 1073741824 values", "read /bigchunk")
  deep_eq(f:read("/small"):totable(), {1, 2, 3})
end)

t.finish("h5trust_sizes")

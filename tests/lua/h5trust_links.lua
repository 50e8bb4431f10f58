-- h5trust_links.lua — a group of 2^18 + 1 links (h5trust/manylinks.h5): the
-- check refuses the file on open; opened as trusted, f:list refuses the group
-- (listing and iteration visit at most 2^18 links), naming file and group.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, expect_error = t.case, t.expect_error
local path = "h5trust/manylinks.h5"

check("a group of 2^18 + 1 links is refused", function()
  expect_error(function() mp.h5.open(path) end, path .. ": /many: 262145 links in one group, more than 262144", "open")
  local f <close> = mp.h5.open(path, {trusted = true})
  expect_error(function() f:list("/many") end, path .. ": /many: 262145 links in one group, more than 262144", "list")
  assert(f:has("/many"), "the group itself is there")
end)

t.finish("h5trust_links")

-- views_params.lua — views of views of m:param share one storage with the
-- parameter view: when the model is closed or its parameter memory replaced
-- (m:process_weights untying the embedding), every view derived from a
-- parameter, even one whose parent view was already collected, raises "Tensor
-- is no longer valid (<why>)" on read and on write instead of touching freed
-- memory; views of a live model keep reading and writing its memory, a no-op
-- m:dequantize() (float32 weights) keeps them, and a view of a view keeps the
-- model alive like the parameter view itself.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local D, V = 4, 5
local function tiny(extra)
  local cfg = {d_model = D, n_layer = 1, n_head = 1, d_head = D, vocab = V, ctx = 4, mlp = "none", pos = "none",
               seed = 5}
  for k, v in pairs(extra or {}) do cfg[k] = v end
  return mp.model.new(cfg)
end

-- Sub-views whose parent view (the m:param Tensor) is dropped and collected.
local function orphans(m)
  local row = m:param("embed")[2]                              -- [D]
  local nar = m:param("blocks.0.attn.wq"):narrow(2, 2)         -- rows 2..3 of [D, D]
  local rsh = m:param("blocks.0.attn.wv"):reshape(D * D):narrow(1, 3, 5)
  local deep = m:param("embed"):select(3):reshape(2, 2)[1]     -- a view of a view of a view
  collectgarbage(); collectgarbage()                           -- the parents are gone
  return {row = row, narrow = nar, reshape = rsh, deep = deep}
end

-- Every read and write on each view raises `why`.
local function all_invalid(views, why, when)
  for name, v in pairs(views) do
    local what = when .. ": " .. name
    t.expect_error(function() return v:sum() end, why, what .. " sum")
    t.expect_error(function() return v:get(1) end, why, what .. " get")
    t.expect_error(function() return v[1] end, why, what .. " index")
    t.expect_error(function() return v:totable() end, why, what .. " totable")
    t.expect_error(function() return v:clone() end, why, what .. " clone")
    t.expect_error(function() v:set(9, 1) end, why, what .. " set")
    t.expect_error(function() v:fill_(9) end, why, what .. " fill_")
    t.expect_error(function() v[1] = 9 end, why, what .. " newindex")
    t.expect_error(function() v:add_(1) end, why, what .. " add_")
    t.expect_error(function() return v:narrow(1, 1, 1) end, why, what .. " a view of it")
    t.expect_error(function() return mp.zeros{1}:add(v) end, why, what .. " as an operand")
  end
end

t.case("views of views after m:close()", function()
  local m = tiny()
  local views = orphans(m)
  m:close()
  all_invalid(views, "Tensor is no longer valid (the model was closed)", "closed")
end)

t.case("views of views after the model's __close (a to-be-closed variable)", function()
  local views
  do
    local m <close> = tiny()
    views = orphans(m)
  end
  all_invalid(views, "Tensor is no longer valid (the model was closed)", "__close")
end)

t.case("views of views after m:process_weights replaced the memory", function()
  -- the tied embedding is untied by fold_ln: new parameter memory (the same
  -- operation test_weights.lua checks on the parameter view itself)
  local m <close> = tiny{tied = true}
  local views = orphans(m)
  m:process_weights()
  assert(m.config.tied == false, "untied: the memory was replaced")
  all_invalid(views, "parameter memory was replaced", "process_weights")
  -- and m:param gives views of the new memory
  t.near(m:param("embed")[2]:sum(), m.W_E[2]:sum(), 0, "a new view reads the new memory")
end)

t.case("views of views of a live model read and write its memory", function()
  local m <close> = tiny()
  local views = orphans(m)
  -- an independent expectation: the values come from m.W_E (a copy), and a
  -- write through a sub-view shows in a fresh parameter view
  local WE = m.W_E                                            -- [V, D] copy
  for d = 1, D do t.near(views.row:get(d), WE:get(2, d), 0, "row value " .. d) end
  views.row:fill_(7)
  views.narrow[1][1] = -3                                     -- wq row 2, col 1
  collectgarbage()
  for d = 1, D do t.near(m:param("embed"):get(2, d), 7, 0, "write through the row view " .. d) end
  t.near(m:param("blocks.0.attn.wq"):get(2, 1), -3, 0, "write through the narrow view")
  t.near(m.W_E:get(2, 1), 7, 0, "the model's own copy sees the write")
end)

t.case("a no-op m:dequantize() keeps views of views valid", function()
  local m <close> = tiny()
  local views = orphans(m)
  local s = views.row:sum()
  m:dequantize()                                              -- float32 already: the memory stays
  t.near(views.row:sum(), s, 0, "still readable")
  views.deep:fill_(1.5)
  t.near(m:param("embed"):get(3, 1), 1.5, 0, "still writes into the model")
end)

t.case("a view of a view keeps the model alive", function()
  local row = tiny():param("embed")[2]
  local want = row:sum()
  collectgarbage(); collectgarbage()
  t.near(row:sum(), want, 0, "the model was not collected under its views")
end)

t.finish("views_params")

-- h5same.lua A.h5 B.h5 [ATTR...] — two HDF5 files hold the same groups,
-- datasets (shape and values, exactly; NaN equals NaN) and attributes, except
-- the attributes named ATTR (e.g. wall-clock seconds). Exit 1 on a difference.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "../lua/testlib.lua")
local a <close> = mp.h5.open(arg[1])
local b <close> = mp.h5.open(arg[2])
local skip = {}
for i = 3, #arg do skip[arg[i]] = true end
local function same_attrs(obj)
  local x, y = a:attrs(obj), b:attrs(obj)
  for k, v in pairs(x) do
    if not skip[k] then
      local w = y[k]
      local eq = w == v or (type(v) == "table" and type(w) == "table" and #v == #w)
      if type(v) == "table" and eq then for i = 1, #v do eq = eq and v[i] == w[i] end end
      t.ok(eq, ("%s: attribute %s: %s vs %s"):format(obj, k, tostring(v), tostring(w)))
    end
  end
  for k in pairs(y) do t.ok(skip[k] or x[k] ~= nil, ("%s: attribute %s only in %s"):format(obj, k, arg[2])) end
end
local n = 0
local function walk(group)
  same_attrs(group)
  local la, lb = a:list(group), b:list(group)
  t.ok(table.concat(la, ",") == table.concat(lb, ","), group .. ": the same members")
  for _, name in ipairs(la) do
    local path = (group == "/" and "" or group) .. "/" .. name
    if pcall(a.list, a, path) then walk(path) else
      n = n + 1
      local x, y = a:read(path), b:read(path)
      local eq = table.concat(x:shape(), ",") == table.concat(y:shape(), ",")
      if eq then
        local xf, yf = x:reshape{x:numel()}, y:reshape{y:numel()}
        for k = 1, x:numel() do
          local u, v = xf:get(k), yf:get(k)
          if u ~= v and (u == u or v == v) then eq = false; break end
        end
      end
      t.ok(eq, path .. ": same shape and values")
      same_attrs(path)
    end
  end
end
walk("/")
t.ok(n > 0, "datasets compared: " .. n)
t.finish("h5same")

-- test_mirror_rejudge.lua — `mechprobe mirror_descent --rejudge --out DIR` on the
-- stored run tests/data/rejudge/mirror (a --quick run of three seeds at depth
-- 3, 48 sequences: mirror.h5, verdicts.tsv, report.txt as the run wrote them):
-- copied to a temporary folder and re-judged, verdicts.tsv and report.txt come
-- back byte for byte, the file's /verdicts holds the rows' columns and the
-- rest of the file is kept; the same file in the layout of commit 4d4655c
-- (no stored C1 resamples, no n_params, no archs) gives the same rows, C1's
-- note aside; a missing or foreign run file is a clear error that writes nothing.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
package.path = (os.getenv("MP_SRC") or ".") .. "/probes/lib/?.lua;" .. package.path
local V = require "verdicts"
local check = t.ok

local src = (os.getenv("MP_TESTDATA") or ((os.getenv("MP_SRC") or ".") .. "/tests/data")) .. "/rejudge/mirror"
local exe = arg[-1]
local read = t.read_file
local function sh(cmd) local out, ok = t.sh(cmd); return ok, out end
local function tsv_rows(text)
  local rows = {}
  for line in text:gmatch("[^\n]+") do
    local cells = {}
    for c in (line .. "\t"):gmatch("([^\t]*)\t") do cells[#cells + 1] = c end
    rows[#rows + 1] = cells
  end
  return rows
end

-- ---- re-judged byte for byte
local dir, out, stored_tsv = t.rejudge_stored("mirror_descent", "mirror")
local ok
local root = dir:match("^(.*)/run$")
local printed = V.parse(out)
check(#printed == 7 and #V.problems(printed) == 0, ("--rejudge prints the 7 rows in the engine's form, got %d")
  :format(#printed))
local rows = tsv_rows(stored_tsv)
do
  local f <close> = mp.h5.open(dir .. "/mirror.h5")
  for k = 2, #rows do
    local a = f:attrs("verdicts/" .. rows[k][1])
    local same = true
    for j, col in ipairs(V.COLUMNS) do same = same and a[col] == rows[k][j] end
    check(same, "/verdicts/" .. rows[k][1] .. ": every column as in verdicts.tsv")
  end
  check(#f:read("verdicts/C3/t1/values"):totable() == 3, "/verdicts/C3/t1/values: one value per seed")
  -- the rest of the file is kept
  local g <close> = mp.h5.open(src .. "/mirror.h5")
  local d = f:read("estimators/bayes/kl"):sub(g:read("estimators/bayes/kl"))
  check(d:max() == 0 and d:min() == 0, "estimators kept")
  local models = g:list("models")
  check(#models == 12 and #f:list("models") == 12, "the 12 models kept")
  check(f:attrs("models/" .. models[1] .. "/kl").kl_avg == g:attrs("models/" .. models[1] .. "/kl").kl_avg,
        "model attributes kept")
end
-- twice: the same
ok = sh(("%s mirror_descent --rejudge --out %s"):format(exe, dir))
check(ok and read(dir .. "/verdicts.tsv") == stored_tsv, "re-judged twice: the same verdicts.tsv")

-- ---- the layout of commit 4d4655c (the full run in progress when the engine came)
local legacy = root .. "/legacy"
mp.mkdir(legacy)
do
  local s <close> = mp.h5.open(src .. "/mirror.h5")
  local d <close> = mp.h5.open(legacy .. "/mirror.h5", "w")
  local function copy(g)
    for _, name in ipairs(s:list(g)) do
      local p = (g == "/" and "" or (g .. "/")) .. name
      local _, kind = s:has(p)
      if p ~= "verdicts" and p ~= "estimators/best_eta/bayes_match_boot" then
        if kind == "group" then copy(p)
        elseif kind == "dataset" then
          d:write(p, s:read(p))
          for k, v in pairs(s:attrs(p)) do
            if k ~= "n_params" and not (p == "T" and k == "archs") then d:set_attr(p, k, v) end
          end
        end
      end
    end
  end
  copy("/")
end
ok, out = sh(("%s mirror_descent --rejudge --out %s"):format(exe, legacy))
check(ok, "rejudge of the 4d4655c layout exited 0:\n" .. out)
local lt = read(legacy .. "/verdicts.tsv")
check(lt ~= nil, "the 4d4655c layout: verdicts.tsv written (no report.txt there: none rewritten)")
if lt then
  local lrows = tsv_rows(lt)
  local describe = 0
  for j, col in ipairs(V.COLUMNS) do if col == "describe" then describe = j end end
  for k = 2, #rows do
    local same = #lrows[k] == #rows[k]
    for j = 1, #rows[k] do
      if not (rows[k][1] == "C1" and j == describe) then same = same and lrows[k][j] == rows[k][j] end
    end
    check(same, rows[k][1] .. ": the same row from the 4d4655c layout")
  end
  check(lrows[2][describe]:find("recomputed", 1, true), "C1 says its bootstrap was recomputed: " .. lrows[2][describe])
end

-- ---- errors name the file and write nothing
local empty = root .. "/empty"
mp.mkdir(empty)
ok, out = sh(("%s mirror_descent --rejudge --out %s"):format(exe, empty))
check(not ok and out:find(empty .. "/mirror.h5: no such run file", 1, true), "no run file: " .. out)
local foreign = root .. "/foreign"
mp.mkdir(foreign)
do
  local f <close> = mp.h5.open(foreign .. "/mirror.h5", "w")
  f:write("x", {1, 2, 3})
end
local fh = io.open(foreign .. "/report.txt", "w"); fh:write("-- Verdicts\nVERDICT C1 | a | b | c | SUPPORTED\n"); fh:close()
ok, out = sh(("%s mirror_descent --rejudge --out %s"):format(exe, foreign))
check(not ok and out:find(foreign .. "/mirror.h5: not a complete mirror_descent run file", 1, true),
      "a foreign file: " .. out)
check(read(foreign .. "/verdicts.tsv") == nil and read(foreign .. "/report.txt") == "-- Verdicts\nVERDICT C1 | a | b | c | "
      .. "SUPPORTED\n", "a foreign file: nothing written")

os.execute(("rm -rf '%s'"):format(root))
t.finish("test_mirror_rejudge")

-- verdicts.lua — reads the verdict rows that probes print
--   VERDICT id | claim | paper | ours | verdict
-- (mirror_descent, rope_id) so that scripts and tests can check them.
--
--   local verdicts = require "verdicts"
--   local rows = verdicts.parse(report_text)   -- { {id, claim, paper, ours, verdict, line=}, ... }
--   local bad, ids = verdicts.problems(rows)    -- messages (empty: well formed), set of ids
local M = {}

M.words = {["SUPPORTED"] = true, ["NOT SUPPORTED"] = true, ["INCONCLUSIVE"] = true}

function M.parse(text)
  local rows = {}
  for line in text:gmatch("[^\n]+") do
    if line:sub(1, 8) == "VERDICT " then
      local fields = {line = line}
      for f in (line:sub(9) .. " |"):gmatch("%s*(.-)%s+|") do fields[#fields + 1] = f end
      rows[#rows + 1] = fields
    end
  end
  return rows
end

-- What is wrong with parsed rows: a row without 5 fields, a verdict word
-- outside M.words, a claim id that is not "C<digit>" or repeats. Returns the
-- messages (empty when the table is well formed) and the set of ids.
function M.problems(rows)
  local bad, ids = {}, {}
  for _, f in ipairs(rows) do
    if #f ~= 5 then bad[#bad + 1] = "verdict row has 5 fields: " .. f.line end
    if not M.words[f[5] or ""] then bad[#bad + 1] = "verdict word: " .. tostring(f[5]) end
    if not (f[1] and f[1]:match("^C%d$")) or ids[f[1]] then bad[#bad + 1] = "claim id: " .. tostring(f[1]) end
    ids[f[1] or ""] = true
  end
  return bad, ids
end

return M

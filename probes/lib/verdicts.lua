-- verdicts.lua — reads the verdict rows that probes print
--   VERDICT id | claim | paper | ours | verdict
-- (mirror_descent, rope_id) so that scripts and tests can check them.
--
--   local verdicts = require "verdicts"
--   local rows = verdicts.parse(report_text)   -- { {id, claim, paper, ours, verdict, line=}, ... }
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

return M

-- report.lua — the text report a probe prints and keeps: every line goes to
-- stdout (on MPI rank 0 only, so a run under mpirun reports once) and into the
-- report, which save() writes atomically (report.txt).
--
--   local report = require "report"
--   local r = report.new()
--   r:out("== mechprobe %s (%s) ==", name, preset)   -- a line, printf-style
--   r:out("")                                        -- a blank line
--   r:verdicts(V, {58, 40, 62})   -- "VERDICT id | claim | paper | ours | verdict" rows,
--                                 -- claim/paper/ours padded to these widths
--   r:rules(V)                    -- "RULE id: rule" rows
--   r:save(dir .. "/report.txt")
-- A verdict is {id =, claim =, paper =, ours =, word =, rule =}; report.verdict
-- builds one with "|" (the column separator) replaced in its texts.
local M = {}
local R = {}
R.__index = R

function M.new()
  return setmetatable({lines = {}, root = mp.mpi.rank() == 0}, R)
end

function R:out(fmt, ...)
  local s = select("#", ...) > 0 and fmt:format(...) or fmt
  self.lines[#self.lines + 1] = s
  if self.root then print(s) end
end

function M.verdict(id, claim, paper, ours, word, rule)
  local function clean(x) return (tostring(x):gsub("|", "/")) end
  return {id = id, claim = clean(claim), paper = clean(paper), ours = clean(ours), word = word, rule = rule}
end

-- The verdict engine's rows (verdicts.lua): VERDICT, RULE and DESCRIBE lines.
function R:engine_verdicts(V, widths)
  for _, line in ipairs(require("verdicts").report_lines(V, widths)) do self:out(line) end
end

function R:verdicts(V, widths)
  local fmt = ("VERDICT %%s | %%-%ds | %%-%ds | %%-%ds | %%s"):format(widths[1], widths[2], widths[3])
  for _, v in ipairs(V) do self:out(fmt, v.id, v.claim, v.paper, v.ours, v.word) end
end

function R:rules(V)
  for _, v in ipairs(V) do self:out("RULE %s: %s", v.id, v.rule) end
end

function R:text() return table.concat(self.lines, "\n") .. "\n" end

function R:save(path) require("cli").write_text(path, self:text()) end

return M

-- test_readme.lua — every ```lua example of the README and of the manual in docs/
-- runs as written, after the quickstart (the README's main job) has made its demo
-- model. The docs run in a fixed order (DOCS below; a docs/*.md file missing from
-- it fails the test, so a new page cannot go unrun). docs/API.md is not run here:
-- test_api_doc runs its examples. A block fenced ```lua norun is shown, not run
-- (for an example that needs a GPU or MPI); each one is counted and named.
local src = os.getenv("MP_SRC") or "."
local exe = arg[-1]
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local DOCS = {
  "capture.md", "hooks.md", "lua.md", "sae.md", "training.md", "models-and-formats.md",
  "analysis.md", "VIEW.md", "probes.md", "sinks.md", "mirror_descent.md", "group_arith.md",
  "rope_id.md", "gpu.md", "mpi.md", "trust.md", "performance.md", "testing.md", "layout.md",
  "changelog.md", "ARCHITECTURE.md",
}
local NOT_HERE = {["API.md"] = "test_api_doc", ["python.md"] = "test_python_docs"}

local function slurp(path)
  local f = assert(io.open(path))
  local s = f:read("a")
  f:close()
  return s
end

-- every docs/*.md is listed (or run by another test), and every listed one exists
local listed = {}
for _, name in ipairs(DOCS) do listed[name] = true end
local p = assert(io.popen("ls '" .. src .. "/docs'"))
local present = {}
for name in p:lines() do
  if name:match("%.md$") then
    present[name] = true
    t.ok(listed[name] or NOT_HERE[name], "docs/" .. name .. " is not in test_readme.lua's DOCS list")
  end
end
p:close()
for _, name in ipairs(DOCS) do t.ok(present[name], "docs/" .. name .. " (in DOCS) does not exist") end

assert(os.execute(exe .. " quickstart --steps 30 --out out/quickstart > /dev/null 2>&1"), "quickstart failed")

local files = {"README.md"}
for _, name in ipairs(DOCS) do if present[name] then files[#files + 1] = "docs/" .. name end end
local ran, skipped = 0, {}
for _, file in ipairs(files) do
  local text = slurp(src .. "/" .. file)
  local n = 0
  -- a fence opens at the start of a line: ```lua, or ```lua norun
  for info, block in ("\n" .. text):gmatch("\n```lua([^\n]*)\n(.-)```") do
    n = n + 1
    local where = file .. " example " .. n
    if info:match("^%s*norun%s*$") then
      skipped[#skipped + 1] = where
    else
      t.ok(info == "", where .. ": unknown fence info '```lua" .. info .. "'")
      local chunk, err = load(block, "=" .. where, "t")
      local ok, msg = chunk ~= nil, err
      if chunk then
        io.write("-- running ", where, ": ", block:match("^[^\n]*"), "\n")
        ok, msg = pcall(chunk)
      end
      ran = ran + 1
      t.ok(ok, where .. ":\n" .. block .. "\nerror: " .. tostring(msg))
    end
  end
  if file == "README.md" then t.ok(n >= 4, "README.md has " .. n .. " lua examples (expected at least 4)") end
end
io.write(("-- %d examples run, %d marked norun%s\n"):format(ran, #skipped,
  #skipped > 0 and (": " .. table.concat(skipped, ", ")) or ""))
t.ok(ran >= 20, "only " .. ran .. " lua examples found in README.md and docs/ (expected at least 20)")
t.finish("test_readme")

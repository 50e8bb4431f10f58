-- test_readme.lua — every ```lua example of the README runs as written, after
-- the quickstart (the README's main job) has made its demo model.
local src = os.getenv("MP_SRC") or "."
local exe = arg[-1]
assert(os.execute(exe .. " quickstart --steps 30 --out out/quickstart > /dev/null 2>&1"), "quickstart failed")
local f = assert(io.open(src .. "/README.md"))
local readme = f:read("a")
f:close()
local passed, failed = 0, 0
for block in readme:gmatch("```lua\n(.-)```") do
  local chunk, err = load(block, "=README example", "t")
  local ok, msg = chunk ~= nil, err
  if chunk then
    io.write("-- running README example: ", block:match("^[^\n]*"), "\n")
    ok, msg = pcall(chunk)
  end
  if ok then passed = passed + 1 else
    failed = failed + 1
    io.stderr:write("FAIL README example:\n", block, "\nerror: ", tostring(msg), "\n")
  end
end
assert(passed + failed >= 4, "README has fewer lua examples than expected")
print(("%d passed, %d failed"):format(passed, failed))
if failed > 0 then os.exit(1) end

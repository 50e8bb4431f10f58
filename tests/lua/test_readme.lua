-- test_readme.lua — every ```lua example of the README runs as written, after
-- the quickstart (the README's main job) has made its demo model.
local src = os.getenv("MP_SRC") or "."
local exe = arg[-1]
assert(os.execute(exe .. " quickstart --steps 30 --out out/quickstart > /dev/null 2>&1"), "quickstart failed")
local f = assert(io.open(src .. "/README.md"))
local readme = f:read("a")
f:close()
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
for block in readme:gmatch("```lua\n(.-)```") do
  local chunk, err = load(block, "=README example", "t")
  local ok, msg = chunk ~= nil, err
  if chunk then
    io.write("-- running README example: ", block:match("^[^\n]*"), "\n")
    ok, msg = pcall(chunk)
  end
  t.ok(ok, "README example:\n" .. block .. "\nerror: " .. tostring(msg))
end
assert(t.passed + t.failed >= 4, "README has fewer lua examples than expected")
t.finish("test_readme")

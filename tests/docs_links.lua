-- docs_links.lua — the README and the manual in docs/ point at things that exist:
-- every relative link or image ([text](path), ![alt](path)) of README.md and
-- docs/*.md names an existing file or folder, relative to the page; a #anchor on
-- a .md target names a heading of that page (GitHub's slugs); and the README
-- links every page of docs/. Links inside code (fenced blocks, `spans`) and
-- absolute URLs are not checked.
local src = os.getenv("MP_SRC") or "."
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "lua/testlib.lua")

local function slurp(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function exists(path)
  local f = io.open(path)
  if f then f:close() return true end
  return false
end

-- the page without its code: fenced blocks and `spans`
local function prose(text)
  local out, fence = {}, false
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    if line:match("^%s*```") then fence = not fence; out[#out + 1] = ""
    elseif fence then out[#out + 1] = ""
    else out[#out + 1] = (line:gsub("``.-``", ""):gsub("`[^`]*`", "")) end
  end
  return table.concat(out, "\n")
end

-- GitHub's heading anchors: lower case, punctuation dropped (ASCII, and the
-- general-punctuation, arrow and multiplication signs of UTF-8), spaces to
-- hyphens, a repeated heading gets -1, -2, ...
local function anchors(text)
  local set, seen, fence = {}, {}, false
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    if line:match("^%s*```") then fence = not fence
    elseif not fence then
      local h = line:match("^#+%s+(.-)%s*$")
      if h then
        local s = h:lower():gsub("\xE2[\x80\x86][\x80-\xBF]", ""):gsub("\xC3\x97", "")
        s = s:gsub("[^%w%s%-_\x80-\xFF]", ""):gsub("%s", "-")
        local n = seen[s]
        seen[s] = (n or 0) + 1
        set[n and (s .. "-" .. n) or s] = true
      end
    end
  end
  return set
end

local pages = {"README.md"}
local p = assert(io.popen("ls '" .. src .. "/docs'"))
local docs = {}
for name in p:lines() do
  if name:match("%.md$") then pages[#pages + 1] = "docs/" .. name; docs[#docs + 1] = name end
end
p:close()
t.ok(#docs >= 10, "docs/ has " .. #docs .. " pages (expected the manual's, at least 10)")

local checked, readme_targets = 0, {}
for _, page in ipairs(pages) do
  local text = assert(slurp(src .. "/" .. page), page)
  local dir = page:match("^(.*)/") or "."
  for target in prose(text):gmatch("%]%(([^)%s]+)[^)]*%)") do
    if not target:match("^%a[%w+.-]*:") then           -- not http:, https:, mailto:
      local path, anchor = target:match("^([^#]*)#?(.*)$")
      local full = path == "" and (src .. "/" .. page) or (src .. "/" .. dir .. "/" .. path)
      checked = checked + 1
      t.ok(exists(full), ("%s: link (%s): no file %s"):format(page, target, full))
      if anchor ~= "" and full:match("%.md$") and exists(full) then
        t.ok(anchors(slurp(full))[anchor], ("%s: link (%s): no heading #%s in %s"):format(page, target, anchor, path))
      end
      if page == "README.md" then readme_targets[(path:gsub("^%./", ""))] = true end
    end
  end
end
for _, name in ipairs(docs) do
  t.ok(readme_targets["docs/" .. name], "README.md does not link docs/" .. name)
end
io.write(("-- %d relative links checked in %d pages\n"):format(checked, #pages))
t.ok(checked >= 20, "only " .. checked .. " relative links found")
t.finish("test_docs_links")

-- test_api_doc.lua — keeps docs/API.md complete and its examples working.
--
-- What is exported is read at run time, not from a list kept by hand:
--  * every function in the `mp` table (walked recursively) must have a `###`
--    heading naming it (`mp.analyze.pca(`);
--  * every method of every "mechprobe.*" metatable (its __methods or __index
--    table, or the table an __index closure holds as an upvalue) must have a
--    `###` heading `:name(` in the chapter of its type (CHAPTER below; a new type
--    fails until it is given a chapter);
--  * fields served by C __index functions (`strcmp(k, "name")` in lua/*.c: they
--    are not enumerable from Lua) must appear as `.name`, `:name` or `` `name ``
--    in the chapter of their file (FILE_CHAPTER);
--  * every option: the options tables are all checked through lua/lopt.c
--    against a C array `known[] = {...}` (or `extra[]`), so the test parses
--    lua/*.c for those arrays (expanding `#define` lists such as ADAMW_KEYS),
--    finds the function's label (the string passed to mp_lua_opt_check /
--    check_opts, else its `fn = "..."`), and requires a `###` section whose
--    heading names that label (`train(`, `scatter(`) and whose text lists every
--    key as `` `key` ``; an array whose label is a parameter (forward/run_with_*,
--    the interventions) needs some section listing all its keys. Parsing the C
--    was chosen over exposing the arrays at run time: it needs no new API and
--    sees options of functions that cannot be called without a model file;
--  * mp.model.new's options (the config table, generated at run time) come
--    from mp.model.config_fields();
--  * every `--option` of each shipped probe's `--help` must be in its section;
--  * every ```lua example of docs/API.md runs (they make their own tiny model).
local src = os.getenv("MP_SRC") or "."
local exe = arg[-1]
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local function slurp(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local doc = slurp(src .. "/docs/API.md")

-- ---- the document: chapters (##) and sections (###) ----
local chapters, sections = {}, {}
do
  local lines = {}
  for line in (doc .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line end
  local chap, sec, fence = nil, nil, false
  for _, line in ipairs(lines) do
    if line:match("^```") then fence = not fence end
    local h2 = not fence and line:match("^## (.*)")
    local h3 = not fence and line:match("^### (.*)")
    if h2 then
      chap = {heading = h2, body = {}}
      chapters[#chapters + 1] = chap
      sec = nil
    elseif h3 then
      sec = {heading = h3, body = {}, chapter = chap}
      sections[#sections + 1] = sec
    end
    if chap then chap.body[#chap.body + 1] = line end
    if sec then sec.body[#sec.body + 1] = line end
  end
  for _, c in ipairs(chapters) do c.text = table.concat(c.body, "\n") end
  for _, s in ipairs(sections) do s.text = table.concat(s.body, "\n") end
end

-- s contains `word` not followed by an identifier character
local function names(s, word)
  local i = 1
  while true do
    local a, b = s:find(word, i, true)
    if not a then return false end
    if not s:sub(b + 1, b + 1):match("[%w_]") then return true end
    i = b + 1
  end
end

local function chapter(title)
  for _, c in ipairs(chapters) do
    if c.heading:find(title, 1, true) == 1 then return c end
  end
end

-- ---- module functions ----
local n_fns = 0
local function walk(tbl, prefix, seen)
  for k, v in pairs(tbl) do
    if type(k) == "string" then
      local name = prefix .. k
      if type(v) == "function" then
        n_fns = n_fns + 1
        local found = false
        for _, s in ipairs(sections) do
          if names(s.heading, name) then found = true break end
        end
        t.ok(found, "docs/API.md has no ### heading for " .. name)
      elseif type(v) == "table" and not seen[v] then
        seen[v] = true
        walk(v, name .. ".", seen)
      end
    end
  end
end
walk(mp, "mp.", {})
t.ok(n_fns > 50, "the mp table has " .. n_fns .. " functions (expected more than 50)")

-- ---- methods of the object types ----
local CHAPTER = {
  Model = "Models", Tensor = "Tensor", H5 = "HDF5 files", Figure = "Figures", Axes = "Figures",
  MTDTask = "Tasks", AlgebraTask = "Tasks", TextTask = "Tasks", RetrievalTask = "Tasks",
  Optimizer = "Optimizer", Output = "Module functions", SAE = "Sparse autoencoders (`mp.sae`)", Probe = "Analyses", Intervention = "Interventions",
  FactoredMatrix = "Tensor",
}
-- internal helper types (never reach a script)
local INTERNAL = {Guard = true, ModelBusy = true, AnalyzeResult = true, param_views = true, param_owner = true,
                  GradWS = true, SAETrainRun = true}

local function methods_of(mt)
  local idx = mt.__methods or mt.__index
  if type(idx) == "function" then
    local i, found = 1, nil
    while true do
      local un, uv = debug.getupvalue(idx, i)
      if not un then break end
      if type(uv) == "table" then found = uv end
      i = i + 1
    end
    idx = found
  end
  return type(idx) == "table" and idx or nil
end

-- make sure every type's metatable exists (some are created on first use)
do
  local m = mp.model.new{d_model = 8, n_layer = 1, n_head = 1, vocab = 4, ctx = 4}
  m:forward({1, 2})
  m:close()
  mp.analyze.pca(mp.tensor{{1, 0}, {0, 1}, {1, 1}}, 1)
end

local n_methods = 0
for key, mt in pairs(debug.getregistry()) do
  local tname = type(key) == "string" and key:match("^mechprobe%.(.+)$")
  if tname and type(mt) == "table" and not INTERNAL[tname] then
    local title = CHAPTER[tname]
    t.ok(title, "type mechprobe." .. tname .. " has no chapter: document it and map it in CHAPTER")
    local chap = title and chapter(title)
    t.ok(not title or chap, "docs/API.md has no chapter '## " .. tostring(title) .. "'")
    local meths = methods_of(mt)
    if chap and meths then
      for name, v in pairs(meths) do
        if type(v) == "function" then
          n_methods = n_methods + 1
          local found = false
          for _, s in ipairs(sections) do
            if s.chapter == chap and names(s.heading, ":" .. name) then found = true break end
          end
          t.ok(found, ("docs/API.md: no ### heading ':%s(' in '## %s' for mechprobe.%s"):format(name, title, tname))
        end
      end
    end
  end
end
t.ok(n_methods > 60, "the object types have " .. n_methods .. " methods (expected more than 60)")

-- ---- the C sources: __index fields and options arrays ----
local FILE_CHAPTER = {
  ["lmodel.c"] = "Models", ["lout.c"] = "Module functions", ["lprobe.c"] = "Analyses", ["ltasks.c"] = "Tasks",
  ["ltasks_algebra.c"] = "Tasks", ["ltensor.c"] = "Tensor", ["ltrain.c"] = "Optimizer",
  ["lweights.c"] = "Models", ["ldevice.c"] = "Models", ["lsae.c"] = "Sparse autoencoders (`mp.sae`)", ["lsae_train.c"] = "Sparse autoencoders (`mp.sae`)",
  ["lsae_io.c"] = "Sparse autoencoders (`mp.sae`)", ["lsae_view.c"] = "Sparse autoencoders (`mp.sae`)",
  ["lsae_splice.c"] = "Models", ["lfactored.c"] = "Tensor",
}
local files = {}
do
  local p = assert(io.popen("ls '" .. src .. "/lua'"))
  for f in p:lines() do if f:match("%.c$") then files[#files + 1] = f end end
  p:close()
end
t.ok(#files > 10, "found " .. #files .. " binding files in lua/")

local function enclosing_function(text, pos)
  local start, body = 1, nil
  for s in text:gmatch("()\n[%w_][^\n;]-%(lua_State %*L[^)\n]*%)%s*{") do
    if s < pos then start = s else break end
  end
  local e = text:find("\n}", pos, true) or #text
  body = text:sub(start, e)
  return body
end

local function label_of(body)
  for call in body:gmatch("mp_lua_opt_check(%b())") do
    local lit = call:match('^%([^,]*,[^,]*,%s*"([^"]+)"')
    if lit then return lit end
  end
  for call in body:gmatch("check_opts(%b())") do
    local lit = call:match('^%([^,]*,[^,]*,%s*"([^"]+)"')
    if lit then return lit end
  end
  return body:match('fn%s*=%s*"([^"]+)"') or body:match('fn%[%]%s*=%s*"([^"]+)"')
end

local n_arrays, n_keys = 0, 0
for _, file in ipairs(files) do
  local text = slurp(src .. "/lua/" .. file)
  -- fields served by __index functions
  for field in text:gmatch('strcmp%(k,%s*"([%w_]+)"%)') do
    local title = FILE_CHAPTER[file]
    t.ok(title, "lua/" .. file .. " serves field '" .. field .. "': map the file in FILE_CHAPTER")
    local chap = title and chapter(title)
    if chap then
      local ok = names(chap.text, "." .. field) or names(chap.text, ":" .. field) or names(chap.text, "`" .. field)
      t.ok(ok, ("docs/API.md: field '%s' (lua/%s) is not in '## %s'"):format(field, file, title))
    end
  end
  -- option arrays
  local macros = {}
  for name, list in text:gmatch("#define%s+([%w_]+)%s+([^\n]+)") do macros[name] = list end
  for pos, decl, list in text:gmatch("()([%a_][%w_]*)%[%]%s*=%s*(%b{})") do
    if decl:match("^known") or decl == "extra" then
      n_arrays = n_arrays + 1
      local keys = {}
      local expanded = list:gsub("([%a_][%w_]*)", function(id)
        return macros[id] and (" " .. macros[id] .. " ") or id
      end)
      for k in expanded:gmatch('"([^"]+)"') do keys[#keys + 1] = k end
      local label = label_of(enclosing_function(text, pos))
      local short = label and (label:match("[%.:]([%w_]+)$") or label)
      local best, best_missing = nil, nil
      for _, s in ipairs(sections) do
        if not short or names(s.heading, short .. "(") or names(s.heading, short .. "{")
           or s.heading:find(short .. "(", 1, true) or s.heading:find(short .. "{", 1, true) then
          local missing = {}
          for _, k in ipairs(keys) do
            if not s.text:find("`" .. k .. "`", 1, true) then missing[#missing + 1] = k end
          end
          if not best_missing or #missing < #best_missing then best, best_missing = s, missing end
        end
      end
      n_keys = n_keys + #keys
      local where = ("lua/%s %s[] of %s"):format(file, decl, label or "(a function given its name)")
      t.ok(best ~= nil, "docs/API.md: no ### section for " .. where)
      t.ok(best_missing and #best_missing == 0,
           ("docs/API.md: %s: option(s) %s not listed under %s"):format(where,
             table.concat(best_missing or keys, ", "), best and best.heading or "?"))
    end
  end
end
t.ok(n_arrays >= 40 and n_keys >= 150, ("parsed %d option arrays with %d keys (expected >= 40 and >= 150)"):format(n_arrays, n_keys))

-- ---- mp.model.new: the config fields ----
do
  local sec
  for _, s in ipairs(sections) do if s.heading:find("mp.model.new(", 1, true) then sec = s end end
  t.ok(sec, "docs/API.md has no section for mp.model.new")
  for _, f in ipairs(mp.model.config_fields()) do
    t.ok(sec and sec.text:find("`" .. f.key .. "`", 1, true), "mp.model.new option '" .. f.key .. "' is not documented")
  end
end

-- ---- the shipped probes' --help ----
do
  local p = assert(io.popen("ls '" .. src .. "/probes'"))
  local n = 0
  for f in p:lines() do
    local probe = f:match("^([%w_]+)%.lua$")
    if probe then
      n = n + 1
      local h = assert(io.popen("'" .. exe .. "' " .. probe .. " --help 2>&1"))
      local help = h:read("a")
      h:close()
      local sec
      for _, s in ipairs(sections) do if s.heading:find("mechprobe " .. probe .. "`", 1, true) then sec = s end end
      t.ok(sec, "docs/API.md has no section for the probe " .. probe)
      local opts = 0
      for o in help:gmatch("%f[%w-]%-%-[%w][%w-]*") do
        opts = opts + 1
        t.ok(sec and names(sec.text, o), ("docs/API.md: mechprobe %s %s is not documented"):format(probe, o))
      end
      t.ok(opts > 0, "mechprobe " .. probe .. " --help lists no options:\n" .. help)
    end
  end
  p:close()
  t.ok(n >= 5, "found " .. n .. " shipped probes")
end

-- ---- the examples run ----
local n_ex = 0
for block in doc:gmatch("```lua\n(.-)```") do
  n_ex = n_ex + 1
  local chunk, err = load(block, "=API.md example " .. n_ex, "t")
  local ok, msg = chunk ~= nil, err
  if chunk then ok, msg = pcall(chunk) end
  t.ok(ok, "API.md example:\n" .. block .. "\nerror: " .. tostring(msg))
end
t.ok(n_ex >= 10, "docs/API.md has " .. n_ex .. " lua examples (expected at least 10)")

t.finish("test_api_doc")

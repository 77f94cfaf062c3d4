#!/usr/bin/env bash
# Alternated pairs of `iii bench turns`: the way docs/PERFORMANCE.md
# compares two builds, or two sets of flags, on a shared, noisy machine.
# Runs of A and B alternate, so both see the same load; the summary gives
# each side's median and how many pairs B won.
#
#   scripts/bench-pairs.sh [-n PAIRS] [-A REV] [-B REV] [-a FLAGS] [-b FLAGS] [-- BENCH ARGS]
#
#   -n PAIRS   pairs to run (default 8)
#   -A REV     git revision of build A (default HEAD); "." is the working tree
#   -B REV     git revision of build B (default ".")
#   -a FLAGS   extra `bench turns` flags of A (default none)
#   -b FLAGS   extra `bench turns` flags of B (default none)
#   BENCH ARGS `bench turns` flags of both (default --sessions 1 --turns 500)
#
# Every run is `iii bench turns --no-kv -q --json`. Examples:
#
#   scripts/bench-pairs.sh -A main -B .                        # my change against main
#   scripts/bench-pairs.sh -A . -a --local-calls=false -- --sessions 100 --turns 10
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=8 reva=HEAD revb=. flagsa= flagsb=
while getopts "n:A:B:a:b:h" opt; do
	case $opt in
	n) pairs=$OPTARG ;;
	A) reva=$OPTARG ;;
	B) revb=$OPTARG ;;
	a) flagsa=$OPTARG ;;
	b) flagsb=$OPTARG ;;
	*) sed -n '2,20p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
	args=(--sessions 1 --turns 500)
fi

work=$(mktemp -d)
worktrees=()
cleanup() {
	for w in "${worktrees[@]}"; do git worktree remove --force "$w" >/dev/null 2>&1 || true; done
	rm -rf "$work"
}
trap cleanup EXIT

# build REV OUT builds cmd/iii at REV ("." = the working tree) into OUT.
build() {
	local rev=$1 out=$2 src=.
	if [ "$rev" != "." ]; then
		src="$work/src-$(basename "$out")"
		git worktree add --detach -q "$src" "$rev"
		worktrees+=("$src")
	fi
	(cd "$src" && go build -o "$out" ./cmd/iii)
}
echo "building A ($reva) and B ($revb)…" >&2
build "$reva" "$work/a"
build "$revb" "$work/b"

# field NAME reads a number from the JSON on stdin.
field() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p" | head -1; }

# run BIN FLAGS prints "turns/s cpu-µs/turn wake-ups/turn".
run() {
	local json
	# shellcheck disable=SC2086 # FLAGS are words
	json=$("$1" bench turns --no-kv -q --json "${args[@]}" $2)
	printf '%s %s %s\n' "$(field turns_per_s <<<"$json")" "$(field cpu_per_turn_us <<<"$json")" "$(field wakeups_per_turn <<<"$json")"
}

median() { sort -n | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

: >"$work/a.txt"
: >"$work/b.txt"
wins=0
printf '%-5s %10s %10s   %10s %10s\n' pair "A turns/s" "A cpu µs" "B turns/s" "B cpu µs"
for i in $(seq "$pairs"); do
	ra=$(run "$work/a" "$flagsa")
	rb=$(run "$work/b" "$flagsb")
	echo "$ra" >>"$work/a.txt"
	echo "$rb" >>"$work/b.txt"
	read -r ta ca _ <<<"$ra"
	read -r tb cb _ <<<"$rb"
	printf '%-5s %10.0f %10.0f   %10.0f %10.0f\n' "$i" "$ta" "$ca" "$tb" "$cb"
	if awk -v a="$ta" -v b="$tb" 'BEGIN {exit !(b > a)}'; then wins=$((wins + 1)); fi
done
ma=$(cut -d' ' -f1 "$work/a.txt" | median)
mb=$(cut -d' ' -f1 "$work/b.txt" | median)
ca=$(cut -d' ' -f2 "$work/a.txt" | median)
cb=$(cut -d' ' -f2 "$work/b.txt" | median)
wa=$(cut -d' ' -f3 "$work/a.txt" | median)
wb=$(cut -d' ' -f3 "$work/b.txt" | median)
echo
echo "bench turns ${args[*]}: A = $reva $flagsa, B = $revb $flagsb, load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
awk -v ma="$ma" -v mb="$mb" -v ca="$ca" -v cb="$cb" -v wa="$wa" -v wb="$wb" -v w="$wins" -v n="$pairs" 'BEGIN {
	printf "median turns/s  A %.1f  B %.1f  (B/A %.3f; B faster in %d of %d)\n", ma, mb, mb/ma, w, n
	printf "median CPU/turn A %.0f µs  B %.0f µs;  wake-ups/turn A %.0f  B %.0f\n", ca, cb, wa, wb
}'

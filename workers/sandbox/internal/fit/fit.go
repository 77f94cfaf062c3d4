package fit

import (
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Longest is the largest n in [0, max] for which fits(n) holds, where
// fits holds up to some n and not past it (an answer grows with its
// items). It is 0 when fits(1) does not hold; fits(0) is never asked.
func Longest(max int, fits func(n int) bool) int {
	lo, hi := 0, max+1 // fits(lo) holds (or lo is 0), fits(hi) does not
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// Prefix is the longest prefix of s, cut at a rune boundary, whose
// encoding (size) takes at most room bytes. Bytes that are not UTF-8 are
// cut anywhere.
func Prefix(s string, room int64, size func(string) int64) string {
	if size(s) <= room {
		return s
	}
	// Measured at rune boundaries only: a rune cut in two would encode
	// as U+FFFD (six bytes in JSON), larger than the whole rune, and the
	// search needs sizes that grow with the prefix.
	n := Longest(len(s)-1, func(n int) bool { return size(s[:runeStart(s, n)]) <= room })
	return s[:runeStart(s, n)]
}

// runeStart backs n off to the start of a rune s[n] is inside of (at most
// UTFMax-1 bytes: bytes that are not UTF-8 are cut anywhere).
func runeStart(s string, n int) int {
	for i := 0; i < utf8.UTFMax-1 && n > 0 && n < len(s) && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return n
}

// StringSize measures a string encoded in codec, header and quotes
// included.
func StringSize(codec wire.Codec) func(string) int64 {
	return func(s string) int64 {
		b, _ := codec.Marshal(s) // a string always encodes
		return int64(len(b))
	}
}

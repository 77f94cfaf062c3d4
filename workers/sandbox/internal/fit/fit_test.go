package fit_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/sandbox/internal/fit"
)

func TestLongest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ max, limit, want int }{
		{10, 4, 4}, {10, 0, 0}, {10, 10, 10}, {10, 99, 10}, {0, 5, 0}, {1, 1, 1}, {1, 0, 0},
	} {
		asked := map[int]bool{}
		got := fit.Longest(tc.max, func(n int) bool { asked[n] = true; return n <= tc.limit })
		if got != tc.want || asked[0] {
			t.Errorf("Longest(%d) with limit %d = %d (asked 0: %v), want %d", tc.max, tc.limit, got, asked[0], tc.want)
		}
	}
}

func TestPrefix(t *testing.T) {
	t.Parallel()
	for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
		size := fit.StringSize(codec)
		for _, s := range []string{
			strings.Repeat("x", 1000),
			strings.Repeat("\x1b", 1000), // six bytes each in JSON
			strings.Repeat("é€😀", 300),   // runes of two, three and four bytes
			strings.Repeat("\xff", 1000), // not UTF-8
		} {
			for _, room := range []int64{0, 1, 7, 100, 999, 5000, 1 << 20} {
				p := fit.Prefix(s, room, size)
				if !strings.HasPrefix(s, p) || (size(p) > room && p != "") {
					t.Fatalf("%s: prefix of %d bytes takes %d, room %d", codec.ContentType(), len(p), size(p), room)
				}
				if utf8.ValidString(s) && !utf8.ValidString(p) {
					t.Fatalf("%s: a rune cut in two: %q", codec.ContentType(), p[max(0, len(p)-4):])
				}
				// The longest: one rune more does not fit.
				if len(p) < len(s) {
					_, w := utf8.DecodeRuneInString(s[len(p):])
					if size(s[:len(p)+w]) <= room {
						t.Fatalf("%s: prefix of %d bytes is not the longest for room %d", codec.ContentType(), len(p), room)
					}
				}
			}
		}
	}
}

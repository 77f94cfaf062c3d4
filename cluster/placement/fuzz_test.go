package placement_test

import (
	"errors"
	"testing"

	"github.com/iii-on-nats/iii/cluster/placement"
)

func FuzzKey(f *testing.F) {
	for _, s := range [][2]string{{"session", "s-1"}, {"a.b", "c d"}, {"", ""}, {"k", "=x"}, {"k", "é.."}, {"k", string(make([]byte, 400))}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, kind, id string) {
		key := placement.Key(kind, id)
		if !validKVKey(key) {
			t.Fatalf("Key(%q, %q) = %q is not a KV key", kind, id, key)
		}
		if len(key) > 403 {
			t.Fatalf("Key(%q, %q) is %d long", kind, id, len(key))
		}
		k, i, err := placement.ParseKey(key)
		switch {
		case errors.Is(err, placement.ErrKeyNotReversible):
			if len(kind) <= 150 && len(id) <= 150 {
				t.Fatalf("short parts hashed: %q", key)
			}
		case err != nil:
			t.Fatalf("ParseKey(Key(%q, %q) = %q): %v", kind, id, key, err)
		case k != kind || i != id:
			t.Fatalf("round trip (%q, %q) → %q → (%q, %q)", kind, id, key, k, i)
		}
	})
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"session.s-1", "=YS5i.=", "a.==", "a.b.c", "", "x.=_-", "session.==" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		kind, id, err := placement.ParseKey(key)
		if err != nil {
			return
		}
		// A key that parses is the one key of its parts.
		if back := placement.Key(kind, id); back != key {
			t.Fatalf("ParseKey(%q) = (%q, %q), whose key is %q", key, kind, id, back)
		}
	})
}

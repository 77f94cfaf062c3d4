package placement_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/cluster/placement"
)

// kvKey is nats.go's rule for KV keys.
var kvKey = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

func validKVKey(k string) bool {
	return k != "" && k[0] != '.' && k[len(k)-1] != '.' && !strings.Contains(k, "..") && kvKey.MatchString(k)
}

func TestKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		kind, id, key string
		err           error // of ParseKey
	}{
		{"session", "s_01HZX-abc", "session.s_01HZX-abc", nil},
		{"session", "a.b", "session.=YS5i", nil},
		{"session", "", "session.=", nil},
		{"session", "é", "session.=w6k", nil},
		{"session", "=x", "session.=PXg", nil},
		{"my.kind", "x", "=bXkua2luZA.x", nil},
		{"session", long, "session.==" + "", placement.ErrKeyNotReversible},
	} {
		key := placement.Key(tc.kind, tc.id)
		if tc.err == nil && key != tc.key {
			t.Errorf("Key(%q, %q) = %q, want %q", tc.kind, tc.id, key, tc.key)
		}
		if tc.err != nil && !strings.HasPrefix(key, tc.key) {
			t.Errorf("Key(%q, long) = %q, want prefix %q", tc.kind, key, tc.key)
		}
		if !validKVKey(key) {
			t.Errorf("Key(%q, %q) = %q is not a KV key", tc.kind, tc.id, key)
		}
		kind, id, err := placement.ParseKey(key)
		if !errors.Is(err, tc.err) {
			t.Errorf("ParseKey(%q): %v, want %v", key, err, tc.err)
		}
		if err == nil && (kind != tc.kind || id != tc.id) {
			t.Errorf("ParseKey(%q) = %q, %q", key, kind, id)
		}
	}
	for _, bad := range []string{"", "session", "session.", ".x", "session.a=b", "session.=!!", "session.=YQ=", "session.=YQ", "=YQ.x", "a.b.c", "session.==abc"} {
		// "session.=YQ" is "a" encoded, but "a" must be plain: not canonical.
		if _, _, err := placement.ParseKey(bad); !errors.Is(err, placement.ErrInvalidKey) {
			t.Errorf("ParseKey(%q): %v, want ErrInvalidKey", bad, err)
		}
	}
}

package orchestrator

import "testing"

func TestInHomeRegion(t *testing.T) {
	t.Parallel()
	regions := map[string]string{"m-eu": "eu", "m-us": "us", "m-none": ""}
	prefer := inHomeRegion(func(id, key string) (string, bool) {
		if key != metaRegion {
			t.Fatalf("meta key %q", key)
		}
		r, ok := regions[id]
		return r, ok
	})
	tests := []struct {
		member, sid string
		want        bool
	}{
		{"m-eu", "eu.s1", true},
		{"m-us", "eu.s1", false},
		{"m-none", "eu.s1", false},
		{"m-gone", "eu.s1", false},
		{"m-eu", "s1", false}, // a plain session prefers nobody
		{"m-none", "s1", false},
	}
	for _, tt := range tests {
		if got := prefer(tt.member, "session", tt.sid); got != tt.want {
			t.Errorf("member %s, session %s: preferred %v, want %v", tt.member, tt.sid, got, tt.want)
		}
	}
}

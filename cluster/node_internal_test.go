package cluster

import (
	"errors"
	"strings"
	"testing"
)

// A wildcard listen host is not an address a client can be told to dial:
// `iii up --listen 0.0.0.0:4222` printed nats://0.0.0.0:4222.
func TestClientURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://0.0.0.0:4222":     "nats://127.0.0.1:4222",
		"nats://[::]:4222":        "nats://[::1]:4222",
		"tls://0.0.0.0:4443":      "tls://127.0.0.1:4443",
		"nats://127.0.0.1:4222":   "nats://127.0.0.1:4222",
		"nats://10.0.0.5:4222":    "nats://10.0.0.5:4222",
		"nats://example.org:4222": "nats://example.org:4222",
	} {
		if got := clientURL(in); got != want {
			t.Errorf("clientURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// A clustered store records its cluster's name at its first clustered
// start, and a later start under another name is refused.
func TestCheckClusterName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := checkClusterName(dir, "east"); err != nil {
		t.Fatalf("first start: %v", err)
	}
	if err := checkClusterName(dir, "east"); err != nil {
		t.Fatalf("same name again: %v", err)
	}
	err := checkClusterName(dir, "west")
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `belongs to cluster "east", not "west"`) {
		t.Fatalf("another name: %v", err)
	}
}

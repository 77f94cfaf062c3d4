package cluster

import "testing"

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

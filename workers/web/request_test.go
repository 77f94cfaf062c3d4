package web

import (
	"errors"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want string // the URL fetched, or "" when refused
		why  string // a word of the refusal
	}{
		{"https://example.com/", "https://example.com/", ""},
		{"  http://example.com/a?b=c#frag  ", "http://example.com/a?b=c", ""},
		{"HTTPS://Example.COM", "https://Example.COM", ""},
		{"http://example.com:8080/x", "http://example.com:8080/x", ""},
		{"http://[2001:db8::1]:80/", "http://[2001:db8::1]:80/", ""},
		{"http://127.0.0.1/", "http://127.0.0.1/", ""}, // refused later, at the dial
		{"", "", "required"},
		{"   ", "", "required"},
		{"example.com/path", "", "no scheme"},
		{"//example.com/", "", "no scheme"},
		{"file:///etc/passwd", "", "not allowed"},
		{"ftp://example.com/", "", "not allowed"},
		{"gopher://example.com/", "", "not allowed"},
		{"javascript:alert(1)", "", "not allowed"},
		{"data:text/plain,hi", "", "not allowed"},
		{"http:example.com", "", "no host"},
		{"http://", "", "no host"},
		{"http:///path", "", "no host"},
		{"http://:80/", "", "no host"},
		{"http://user:pass@example.com/", "", "credentials"},
		{"http://user@example.com/", "", "credentials"},
		{"http://example.com:0/", "", "port"},
		{"http://example.com:99999/", "", "port"},
		{"http://exa mple.com/", "", "parse"},
		{"http://example.com/\x00", "", "parse"},
		{"http://example.com/\xff", "", "UTF-8"},
		{"http://example.com/" + strings.Repeat("a", MaxURLLength), "", "longer"},
	}
	for _, tt := range tests {
		u, err := parseURL(tt.raw)
		switch {
		case tt.want != "" && err != nil:
			t.Errorf("parseURL(%q): %v", tt.raw, err)
		case tt.want != "" && u.String() != tt.want:
			t.Errorf("parseURL(%q) = %s, want %s", tt.raw, u, tt.want)
		case tt.want == "" && err == nil:
			t.Errorf("parseURL(%q) = %s, want a refusal", tt.raw, u)
		case tt.want == "" && !strings.Contains(err.Error(), tt.why):
			t.Errorf("parseURL(%q): %q does not say %q", tt.raw, err, tt.why)
		}
	}
}

func TestFetchRequestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  FetchRequest
		ok   bool
	}{
		{"minimal", FetchRequest{URL: "https://example.com/"}, true},
		{"all", FetchRequest{URL: "https://example.com/", MaxBytes: 10, TimeoutMs: 60000}, true},
		{"huge max_bytes", FetchRequest{URL: "https://example.com/", MaxBytes: 1 << 62}, true},
		{"no url", FetchRequest{}, false},
		{"scheme", FetchRequest{URL: "file:///etc/passwd"}, false},
		{"negative max_bytes", FetchRequest{URL: "https://example.com/", MaxBytes: -1}, false},
		{"negative timeout", FetchRequest{URL: "https://example.com/", TimeoutMs: -1}, false},
		{"timeout over max", FetchRequest{URL: "https://example.com/", TimeoutMs: 60001}, false},
	}
	for _, tt := range tests {
		err := tt.req.Validate()
		if tt.ok != (err == nil) {
			t.Errorf("%s: Validate() = %v", tt.name, err)
		}
		if err != nil && !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%s: %v is not invalid_payload", tt.name, err)
		}
	}
}

package redact_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent/redact"
)

var fuzzSeeds = []string{
	`{"path":"/x","api_key":"sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz"}`,
	`{"a":{"b":[{"password":"p1"},{"token":"t","max_tokens":5}]},"c":"Bearer abc"}`,
	`["curl -H 'Authorization: Bearer abcdef123456' https://u:p@x/", "password=x; token: y", "--password z"]`,
	`{"\u2028":"\xff","e":1e400,"n":-0.0,"k":[[[[[[]]]]]]}`,
	`"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig"`,
	`"-----BEGIN EC PRIVATE KEY-----\nabc\n-----END EC PRIVATE KEY-----"`,
	`{"AKIAIOSFODNN7EXAMPLE":"x","[redacted]":1}`,
	`{\"token\":\"abc\"}`,
	"db:\n  password: |\n    x\n  token:\n   y\n", `['password' => 'x', k := "y", s: str = "z"]`,
	"env:\n- name: DB_PASSWORD\n  value: x\n- name: PORT\n  value: 1\n", `{name: pin, value: 1}`,
	"db_pw=x PWD=/y hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCd ya29.AbCdEfGhIjKlMnOpQrSt.",
	`null`, `true`, `0`, `""`, `{}`, `[]`, `not json`,
}

// fuzzValue decodes data as the harness does, or takes it as a string.
func fuzzValue(data []byte) any {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return string(data)
	}
	return v
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

// FuzzValue: Value never panics, never modifies its input, yields
// something JSON can encode and is idempotent; its size stays within a
// bound of the input's.
func FuzzValue(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzValue(data)
		before := mustJSON(t, in)
		out := redact.Value(in)
		if after := mustJSON(t, in); !bytes.Equal(before, after) {
			t.Fatalf("input changed: %s → %s", before, after)
		}
		got := mustJSON(t, out)
		// Each redaction replaces at least one byte by len("[redacted]").
		if limit := len(redact.Redacted)*len(before) + 64; len(got) > limit {
			t.Fatalf("output %d bytes for %d of input", len(got), len(before))
		}
		if again := redact.Value(out); !reflect.DeepEqual(again, out) {
			t.Fatalf("not idempotent:\n%s\n%s", got, mustJSON(t, again))
		}
	})
}

// FuzzExcerpt: an excerpt fits its budget, is valid UTF-8, is valid JSON
// unless it was cut, and without clipping is exactly encoding/json's view of
// Value.
func FuzzExcerpt(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add([]byte(s), i*7, uint8(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, maxBytes int, small uint8) {
		in := fuzzValue(data)
		maxBytes %= 4096
		got := redact.Excerpt(in, maxBytes, redact.WithMaxString(int(small%64)+1), redact.WithMaxItems(int(small%8)+1))
		if len(got) > max(maxBytes, redact.MinExcerpt) {
			t.Fatalf("len %d > max %d", len(got), maxBytes)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8: %q", got)
		}
		if !strings.HasSuffix(got, "…") && !json.Valid([]byte(got)) {
			t.Fatalf("uncut excerpt is not JSON: %s", got)
		}

		r, err := redact.New(redact.WithMaxString(1<<30), redact.WithMaxItems(1<<30))
		if err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		e := json.NewEncoder(&want)
		e.SetEscapeHTML(false)
		if err := e.Encode(r.Value(in)); err != nil {
			t.Fatal(err)
		}
		if full := r.Excerpt(in, 1<<30); full != strings.TrimSuffix(want.String(), "\n") {
			t.Fatalf("excerpt differs from encoding/json:\n got %s\nwant %s", full, want.String())
		}
	})
}

// secretKeys are spellings of secret keys a model may use.
var secretKeys = []string{
	"password", "API-Key", "apiKey", "X-Api-Key", "client.secret", "access_token", "Authorization",
	"PIN", "private_key", "Set-Cookie", "otp", "db_pass", "credentials", "SESSION_TOKEN", "basic_auth",
}

// build turns shape into a nested value: each byte opens an object or a
// list, adds an innocent value, closes, or places the secret (under a
// secret key, or as a list of it under one). The secret is placed at
// least once.
func build(shape []byte, secret string) any {
	pos, placed := 0, false
	var node func(depth int) any
	node = func(depth int) any {
		if pos >= len(shape) || depth > 40 {
			return "leaf"
		}
		op := shape[pos]
		pos++
		switch op % 6 {
		case 0, 1:
			m := map[string]any{}
			for i := 0; pos < len(shape) && shape[pos]%6 != 5 && i < 8; i++ {
				if shape[pos]%6 == 4 {
					pos++
					placed = true
					k := secretKeys[int(shape[pos-1])%len(secretKeys)]
					if shape[pos-1]%2 == 0 {
						m[k] = secret
					} else {
						m[k] = []any{secret, map[string]any{"x": secret}}
					}
					continue
				}
				m[[]string{"path", "name", "n", "items", "command"}[i%5]] = node(depth + 1)
			}
			pos++
			return m
		case 2:
			l := []any{}
			for i := 0; pos < len(shape) && shape[pos]%6 != 5 && i < 8; i++ {
				l = append(l, node(depth+1))
			}
			pos++
			return l
		case 3:
			return json.Number("42")
		default:
			return "some/innocent path"
		}
	}
	v := node(0)
	if !placed {
		v = map[string]any{"wrapped": v, secretKeys[len(shape)%len(secretKeys)]: secret}
	}
	return v
}

// FuzzExcerptSecret: a secret under a secret key never shows in an
// excerpt or in Value's JSON, however it is nested, whatever the budget.
func FuzzExcerptSecret(f *testing.F) {
	f.Add([]byte{0, 4, 1, 2, 3, 5, 5}, "hunter2-correct-horse", 200)
	f.Add([]byte{2, 0, 4, 5, 2, 1, 10, 5, 5}, "s3cr3t value with spaces", 16)
	f.Add([]byte{}, "p@ss:w/o\"rd\\", 1000)
	f.Fuzz(func(t *testing.T, shape []byte, secret string, maxBytes int) {
		if len(secret) < 6 || strings.Contains("[redacted]", secret) {
			return // too short to tell from the surrounding JSON
		}
		esc := mustJSON(t, secret)
		esc = esc[1 : len(esc)-1] // as it would appear inside a JSON string
		maxBytes %= 8192
		in := build(shape, secret)
		ref := build(shape, "\x00")
		for _, check := range []struct {
			name     string
			got, ref string
		}{
			{"excerpt", redact.Excerpt(in, maxBytes), redact.Excerpt(ref, maxBytes)},
			{"value", string(mustJSON(t, redact.Value(in))), string(mustJSON(t, redact.Value(ref)))},
		} {
			for _, needle := range []string{secret, string(esc)} {
				// The needle may occur by chance in the structure around
				// the secret: only a new occurrence is a leak.
				if strings.Count(check.got, needle) > strings.Count(check.ref, needle) {
					t.Fatalf("%s leaks %q: %s", check.name, needle, check.got)
				}
			}
		}
	})
}

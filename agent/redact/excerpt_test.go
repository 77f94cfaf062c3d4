package redact_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent/redact"
)

func TestExcerpt(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 1000)
	for _, tc := range []struct {
		name string
		in   any
		max  int
		opts []redact.Option
		want string
	}{
		{"fits", decode(t, `{"path":"/x","api_key":"`+anthropicKey+`"}`), 512, nil, `{"api_key":"[redacted]","path":"/x"}`},
		{"html is not escaped", "a<b>&c", 64, nil, `"a<b>&c"`},
		{"long string is clipped", map[string]any{"a": long, "b": "keep"}, 512, nil,
			`{"a":"` + long[:200] + `…(+800 bytes)","b":"keep"}`},
		{"clip on a rune boundary", strings.Repeat("é", 10), 64, []redact.Option{redact.WithMaxString(5)}, `"éé…(+16 bytes)"`},
		{"long key is clipped", map[string]any{long: 1}, 512, []redact.Option{redact.WithMaxString(3)}, `{"xxx…(+997 bytes)":1}`},
		{"secret clipped after redaction", map[string]any{"a": "token=" + long}, 512, []redact.Option{redact.WithMaxString(8)}, `{"a":"token=[r…(+8 bytes)"}`},
		{"list items", decode(t, `[0,1,2,3,4,5,6,7,8,9]`), 512, []redact.Option{redact.WithMaxItems(3)}, `[0,1,2,"…(+7 items)"]`},
		{"object keys", decode(t, `{"e":5,"d":4,"c":3,"b":2,"a":1}`), 512, []redact.Option{redact.WithMaxItems(2)}, `{"a":1,"b":2,"…":"+3 keys"}`},
		{"depth", decode(t, `{"a":{"b":{"c":1}}}`), 512, []redact.Option{redact.WithMaxDepth(2)}, `{"a":{"b":"[…]"}}`},
		{"cut", decode(t, `{"command":"ls -la /very/long/path/that/does/not/fit"}`), 24, nil, `{"command":"ls -la /v…`},
		{"cut on a rune boundary", "ééééééééééééééééééééé", 20, nil, `"éééééééé…`},
		{"max is clamped", decode(t, `{"command":"ls -la /very/long/path"}`), 0, nil, `{"command":"l…`},
		{"negative max", "abcdefghijklmnopqrstuvwxyz", -5, nil, `"abcdefghijkl…`},
		{"escapes", "a\"b\\c\n\t\b\f\x01\u2028", 64, nil, `"a\"b\\c\n\t\b\f\u0001\u2028"`},
		{"invalid utf8", "a\xffb", 64, nil, `"a\ufffdb"`},
		{"numbers", []any{math.NaN(), math.Inf(-1), 1e21, 1e-7, 0.1, float32(0.1), json.Number("12"), json.Number("x1")}, 512, nil,
			`["NaN","-Inf",1e+21,1e-7,0.1,0.1,12,"x1"]`},
		{"go types", creds{User: "u", Password: "p"}, 64, nil, `{"password":"[redacted]","user":"u"}`},
		{"nil", nil, 64, nil, `null`},
		{"nil map", map[string]any(nil), 64, nil, `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := redact.Excerpt(tc.in, tc.max, tc.opts...)
			if got != tc.want {
				t.Errorf("Excerpt\n got %s\nwant %s", got, tc.want)
			}
			if limit := max(tc.max, redact.MinExcerpt); len(got) > limit {
				t.Errorf("len %d > %d", len(got), limit)
			}
			if !utf8.ValidString(got) {
				t.Errorf("invalid UTF-8: %q", got)
			}
			if !strings.HasSuffix(got, "…") && !json.Valid([]byte(got)) {
				t.Errorf("uncut excerpt is not JSON: %s", got)
			}
		})
	}
}

// With no clipping, an excerpt is exactly what encoding/json writes for
// Value (keys sorted, HTML not escaped).
func TestExcerptMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	r, err := redact.New(redact.WithMaxString(1<<30), redact.WithMaxItems(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{
		`{"a":[1,2.5,-3e-9,1e300,123456789012345678901234567890],"b":{"password":"x","c":null,"d":true},"e":"\u00e9\u2029<>&"}`,
		`[{"Authorization":"Bearer x"},"` + awsKey + `",[],{}]`,
		`"plain"`, `0`, `null`,
	} {
		v := decode(t, in)
		if got, want := r.Excerpt(v, 1<<20), encode(t, r.Value(v)); got != want {
			t.Errorf("Excerpt(%s)\n got %s\nwant %s", in, got, want)
		}
	}
}

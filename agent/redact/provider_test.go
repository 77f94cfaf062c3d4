package redact_test

import (
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent/redact"
)

// Keys of providers the OpenAI-compatible worker serves, in the shapes
// their vendors issue.
const (
	googleKey = "AIzaSyD-EXAMPLEexample0123456789abcdEFg"
	groqKey   = "gsk_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKlMn"
	xaiKey    = "xai-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCd"
	sasSig    = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA%3D%3D"
)

// The args_excerpt of a denial is [redact.Excerpt] of the call's args at
// 512 bytes: a provider key in a call a model makes must not survive it,
// and what is around it must.
func TestExcerptProviderKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		args   map[string]any
		secret string
		kept   []string
	}{
		{"google key in a query", map[string]any{"url": "https://generativelanguage.googleapis.com/v1beta/models?key=" + googleKey + "&pageSize=5"},
			googleKey, []string{"generativelanguage.googleapis.com", "?key=[redacted]&pageSize=5"}},
		{"google key, unnamed", map[string]any{"command": "gcloud-call " + googleKey + " now"},
			googleKey, []string{"gcloud-call [redacted] now"}},
		{"groq key in a command", map[string]any{"command": "GROQ=" + groqKey + " python a.py"},
			groqKey, []string{"GROQ=[redacted] python a.py"}},
		{"xai key in a command", map[string]any{"command": "export XAI=" + xaiKey + "; run"},
			xaiKey, []string{"export XAI=[redacted]; run"}},
		{"sas signature", map[string]any{"url": "https://a.blob.core.windows.net/c/b?sv=2021-08-06&sr=b&sp=r&sig=" + sasSig},
			sasSig, []string{"sv=2021-08-06&sr=b&sp=r&sig=[redacted]"}},
		{"KEY in a query, upper case", map[string]any{"url": "https://x.example/v1?KEY=" + "plainkey123456"},
			"plainkey123456", []string{"?KEY=[redacted]"}},
		{"anthropic key in a header", map[string]any{"command": "curl -H 'x-api-key: " + anthropicKey + "' https://api.anthropic.com"},
			anthropicKey, []string{"x-api-key: [redacted]"}},
		{"openai key, unnamed", map[string]any{"text": "use " + openAIKey},
			openAIKey, []string{"use [redacted]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := redact.Excerpt(tc.args, 512)
			if strings.Contains(got, tc.secret) || strings.Contains(got, tc.secret[:10]) {
				t.Errorf("the key survived: %s", got)
			}
			for _, k := range tc.kept {
				if !strings.Contains(got, k) {
					t.Errorf("%q lost: %s", k, got)
				}
			}
		})
	}
}

// "key" and "sig" are secrets only as query parameters.
func TestQueryKeysOnlyInQueries(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`{"key":"state/a","sig":"v1"}`,
		"key=value sig=x",
		"monkey=1&donkey=2",
		"https://x.example/?monkey=1&keys=2&signal=3",
		"sort key=name",
		"a gsk_ b xai- c AIza d",
		"taskgsk_AbCdEfGhIjKlMnOpQrStUvWx",
		"goxai-AbCdEfGhIjKlMnOpQrStUvWx",
		"AIzaTooShort",
	} {
		if got := redact.Value(in); got != in {
			t.Errorf("Value(%q) = %q, want it unchanged", in, got)
		}
	}
}

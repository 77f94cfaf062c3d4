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

// Prefixed tokens of code hosts, registries, payment and model APIs: each
// was shown whole under an innocent key or in a command.
func TestValueTokenShapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, token string }{
		{"hugging face", "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"},
		{"gitlab pat", "glpat-AbCdEfGhIjKlMnOpQrSt"},
		{"gitlab pat, routable", "glpat-AbCdEfGhIjKlMnOpQrStUvWxYz0.01.0w1a2b3c4"},
		{"gitlab deploy token", "gldt-AbCdEfGhIjKlMnOpQrSt"},
		{"gitlab runner token", "glrt-AbCdEfGhIjKlMnOpQrSt"},
		{"stripe live secret", "sk_live_51AbCdEfGhIjKlMnOpQrStUvWx"},
		{"stripe test secret", "sk_test_51AbCdEfGhIjKlMnOpQrStUvWx"},
		{"stripe restricted", "rk_live_51AbCdEfGhIjKlMnOpQrStUvWx"},
		{"stripe webhook secret", "whsec_AbCdEfGhIjKlMnOpQrStUvWx0123+/=="},
		{"npm", "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"},
		{"pypi", "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0LXV2d3h5ejAxMjM0"},
		{"google oauth access token", "ya29.a0AfB_byC-AbCdEfGhIjKlMnOpQrStUvWx0123"},
		{"github fine-grained", "github_pat_11ABCDEFG0AbCdEfGhIjKl_MnOpQrStUvWxYz0123456789"},
		{"slack refresh", "xoxe-1-AbCdEfGhIjKlMnOpQrStUvWx"},
		{"slack app-level", "xapp-1-A0123456789-1234567890123-abcdef0123456789"},
		{"replicate", "r8_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789a"},
		{"perplexity", "pplx-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGh"},
		{"digitalocean", "dop_v1_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for in, want := range map[string]string{
				tc.token:                               redact.Redacted,
				"curl -u x:" + tc.token + " https://h": "curl -u x:[redacted] https://h",
				"export V='" + tc.token + "'; run":     "export V='[redacted]'; run",
				"the token is " + tc.token + ".":       "the token is [redacted].",
			} {
				if got := redact.Value(in); got != want {
					t.Errorf("Value(%q)\n got %q\nwant %q", in, got, want)
				}
			}
		})
	}
	// Too short, inside a word, or the prefix alone: ordinary text.
	for _, in := range []string{
		"see hf_ and npm_install and sk_live_ mode",
		"npm_install_dependencies_for_the_whole_project",
		"thf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
		"task_live_AbCdEfGhIjKlMnOpQrStUvWx",
		"hf_short glpat-short ya29.short sk_live_short",
		"ya29.5 percent of rows",
		"the glpat- prefix",
		"git log --oneline | head",
	} {
		if got := redact.Value(in); got != in {
			t.Errorf("Value(%q) = %q, want it unchanged", in, got)
		}
	}
}

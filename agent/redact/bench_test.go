package redact_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/iii-on-nats/iii/agent/redact"
)

// typicalArgs is a shell::exec-like call of about 1 KiB of JSON, with a
// couple of secrets, as a model writes it.
const typicalArgs = `{
 "command": "cd /workspace/service && OPENAI_API_KEY=sk-proj-AbCdEfGhIjKlMnOpQrSt1234 go test -run TestIntegration ./internal/... -count=1 -v 2>&1 | tail -n 200",
 "cwd": "/workspace/service",
 "timeout_ms": 120000,
 "env": {"PATH": "/usr/local/go/bin:/usr/bin:/bin", "GOFLAGS": "-mod=readonly", "GITHUB_TOKEN": "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "HOME": "/home/agent"},
 "description": "Run the integration tests of the service package after the refactor of the retry loop, and show the last two hundred lines of output so the failures can be read.",
 "files": ["internal/retry/retry.go", "internal/retry/retry_test.go", "internal/client/client.go", "internal/client/options.go", "cmd/service/main.go"],
 "options": {"max_tokens": 4096, "stream": true, "temperature": 0.2, "stop": ["\n\nHuman:"], "metadata": {"session_id": "sess_01HZX3J8K9", "user": "ann"}},
 "headers": {"Authorization": "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl", "Accept": "application/json"}
}`

func benchArgs(b *testing.B) any {
	var v any
	if err := json.Unmarshal([]byte(typicalArgs), &v); err != nil {
		b.Fatal(err)
	}
	return v
}

func BenchmarkExcerpt(b *testing.B) {
	v := benchArgs(b)
	for _, max := range []int{512, 4096} {
		b.Run("args=1KiB,max="+strconv.Itoa(max), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(typicalArgs)))
			for b.Loop() {
				_ = redact.Excerpt(v, max)
			}
		})
	}
}

func BenchmarkValue(b *testing.B) {
	v := benchArgs(b)
	b.Run("args=1KiB", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(typicalArgs)))
		for b.Loop() {
			_ = redact.Value(v)
		}
	})
}

func BenchmarkIsSecretKey(b *testing.B) {
	keys := []string{"path", "max_tokens", "X-Api-Key", "description", "userPinCode", "tokenizer_name"}
	b.ReportAllocs()
	for b.Loop() {
		for _, k := range keys {
			_ = redact.IsSecretKey(k)
		}
	}
}

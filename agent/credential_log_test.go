package agent_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

// A credential logged with slog, by either handler, never shows its
// secret: without LogValue the JSON handler marshalled its fields.
func TestCredentialLogValue(t *testing.T) {
	t.Parallel()
	c := agent.Credential{Type: agent.CredentialOAuth, Key: "sk-key-secret", AccessToken: "at-secret", RefreshToken: "rt-secret"}
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var b bytes.Buffer
		slog.New(h(&b)).Info("credential", "credential", c)
		out := b.String()
		for _, s := range []string{"sk-key-secret", "at-secret", "rt-secret"} {
			if strings.Contains(out, s) {
				t.Fatalf("logged the secret %q: %s", s, out)
			}
		}
		if !strings.Contains(out, "[redacted]") {
			t.Fatalf("no redacted credential in %s", out)
		}
	}
}

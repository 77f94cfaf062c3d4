package auth_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/workers/auth"
)

// A set_token request logged with slog's JSON handler shows its provider,
// never the credential's secret.
func TestSetTokenRequestLogValue(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	req := auth.SetTokenRequest{Provider: "anthropic", Credential: agent.Credential{Type: agent.CredentialAPIKey, Key: "sk-ant-secret"}}
	slog.New(slog.NewJSONHandler(&b, nil)).Info("set", "req", req)
	if out := b.String(); strings.Contains(out, "sk-ant-secret") || !strings.Contains(out, "anthropic") {
		t.Fatalf("logged %s", out)
	}
}

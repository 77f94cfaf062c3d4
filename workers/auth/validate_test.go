package auth

import (
	"errors"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

func TestValidateCredential(t *testing.T) {
	t.Parallel()
	key := func(k string) agent.Credential { return agent.Credential{Type: agent.CredentialAPIKey, Key: k} }
	oauth := func(a, r string, exp int64) agent.Credential {
		return agent.Credential{Type: agent.CredentialOAuth, AccessToken: a, RefreshToken: r, ExpiresAt: exp}
	}
	tests := []struct {
		name string
		c    agent.Credential
		ok   bool
	}{
		{"api key", key("sk-ant-api03-abc_DEF-123"), true},
		{"api key at the bound", key(strings.Repeat("k", MaxKeyBytes)), true},
		{"api key non-ASCII", key("clé-é"), true},
		{"api key U+FFFD is valid UTF-8", key("a\uFFFDb"), true},
		{"oauth minimal", oauth("at", "", 0), true},
		{"oauth full", oauth("at", "rt", 1_700_000_000_000), true},
		{"oauth expired still valid", oauth("at", "rt", 1), true},
		{"oauth token at the bound", oauth(strings.Repeat("t", MaxTokenBytes), "", 0), true},

		{"empty", agent.Credential{}, false},
		{"no type", agent.Credential{Key: "k"}, false},
		{"unknown type", agent.Credential{Type: "bearer", Key: "k"}, false},
		{"type case", agent.Credential{Type: "API_KEY", Key: "k"}, false},
		{"api key empty", key(""), false},
		{"api key too long", key(strings.Repeat("k", MaxKeyBytes+1)), false},
		{"api key space", key("sk ant"), false},
		{"api key leading space", key(" sk"), false},
		{"api key trailing newline", key("sk\n"), false},
		{"api key tab", key("s\tk"), false},
		{"api key NUL", key("s\x00k"), false},
		{"api key DEL", key("s\x7fk"), false},
		{"api key NBSP", key("s\u00a0k"), false},
		{"api key bad UTF-8", key("s\xffk"), false},
		{"api key with access token", agent.Credential{Type: agent.CredentialAPIKey, Key: "k", AccessToken: "a"}, false},
		{"api key with refresh token", agent.Credential{Type: agent.CredentialAPIKey, Key: "k", RefreshToken: "r"}, false},
		{"api key with expiry", agent.Credential{Type: agent.CredentialAPIKey, Key: "k", ExpiresAt: 5}, false},
		{"oauth no access token", oauth("", "rt", 0), false},
		{"oauth access token too long", oauth(strings.Repeat("t", MaxTokenBytes+1), "", 0), false},
		{"oauth refresh token space", oauth("at", "r t", 0), false},
		{"oauth refresh token too long", oauth("at", strings.Repeat("r", MaxTokenBytes+1), 0), false},
		{"oauth negative expiry", oauth("at", "", -1), false},
		{"oauth with key", agent.Credential{Type: agent.CredentialOAuth, AccessToken: "a", Key: "k"}, false},
		{"oauth access token control", oauth("a\rb", "", 0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateCredential(tt.c)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateCredential = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidCredential) {
				t.Fatalf("%v does not wrap ErrInvalidCredential", err)
			}
		})
	}
}

func TestValidateProvider(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"anthropic", "openai", "ollama", "my-llm", "A_1", strings.Repeat("p", 128)} {
		if err := ValidateProvider(p); err != nil {
			t.Errorf("ValidateProvider(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"", "a.b", "a b", "a/b", "a*", "a>", "é", "a\x00", "a::b", strings.Repeat("p", 129)} {
		err := ValidateProvider(p)
		if !errors.Is(err, ErrInvalidProvider) {
			t.Errorf("ValidateProvider(%q) = %v, want ErrInvalidProvider", p, err)
		}
		if p != "" && strings.Contains(err.Error(), p) {
			t.Errorf("error %q quotes the provider", err)
		}
	}
}

func TestRequestValidate(t *testing.T) {
	t.Parallel()
	good := agent.Credential{Type: agent.CredentialAPIKey, Key: "k1"}
	tests := []struct {
		name string
		req  interface{ Validate() error }
		ok   bool
	}{
		{"get", GetTokenRequest{Provider: "anthropic"}, true},
		{"get empty", GetTokenRequest{}, false},
		{"get dotted", GetTokenRequest{Provider: "a.b"}, false},
		{"set", SetTokenRequest{Provider: "p", Credential: good}, true},
		{"set no provider", SetTokenRequest{Credential: good}, false},
		{"set no credential", SetTokenRequest{Provider: "p"}, false},
		{"set bad credential", SetTokenRequest{Provider: "p", Credential: agent.Credential{Type: "x"}}, false},
		{"delete", DeleteTokenRequest{Provider: "p"}, true},
		{"delete empty", DeleteTokenRequest{}, false},
		{"status all", StatusRequest{}, true},
		{"status one", StatusRequest{Provider: "p"}, true},
		{"status bad", StatusRequest{Provider: "p q"}, false},
		{"status after", StatusRequest{After: "p"}, true},
		{"status bad after", StatusRequest{After: "p/q"}, false},
		{"status provider and after", StatusRequest{Provider: "p", After: "q"}, false},
		{"list", ListProvidersRequest{}, true},
		{"list after", ListProvidersRequest{After: "p_1-X"}, true},
		{"list bad after", ListProvidersRequest{After: "p q"}, false},
		{"list long after", ListProvidersRequest{After: strings.Repeat("a", agent.MaxIDLen+1)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, wire.ErrInvalidPayload) {
				t.Fatalf("%v is not invalid_payload", err)
			}
		})
	}
}

func TestEnvVar(t *testing.T) {
	t.Parallel()
	tests := []struct {
		provider string
		want     []string
	}{
		{"anthropic", []string{"III_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"}},
		{"openai", []string{"III_OPENAI_API_KEY", "OPENAI_API_KEY"}},
		{"ollama", []string{"III_OLLAMA_API_KEY"}},
		{"my-llm", []string{"III_MY_LLM_API_KEY"}},
		{"Kimi_2", []string{"III_KIMI_2_API_KEY"}},
	}
	for _, tt := range tests {
		got := EnvVars(tt.provider)
		if strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("EnvVars(%q) = %v, want %v", tt.provider, got, tt.want)
		}
		if EnvVar(tt.provider) != tt.want[0] {
			t.Errorf("EnvVar(%q) = %q", tt.provider, EnvVar(tt.provider))
		}
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	a := Fingerprint(agent.Credential{Type: agent.CredentialAPIKey, Key: "key-a"})
	b := Fingerprint(agent.Credential{Type: agent.CredentialAPIKey, Key: "key-b"})
	o := Fingerprint(agent.Credential{Type: agent.CredentialOAuth, AccessToken: "key-a", RefreshToken: "other"})
	if len(a) != 8 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Fatalf("fingerprint %q is not 8 lower-case hex digits", a)
	}
	if a == b {
		t.Fatalf("two keys share fingerprint %q", a)
	}
	if a != o {
		t.Fatalf("an oauth credential's fingerprint %q is not its access token's %q", o, a)
	}
	// SHA-256("abc") starts ba7816bf: pin the algorithm.
	if want := Fingerprint(agent.Credential{Type: agent.CredentialAPIKey, Key: "abc"}); want != "ba7816bf" {
		t.Fatalf("Fingerprint(abc) = %q, want ba7816bf (SHA-256)", want)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]Option{
		"empty vault path":  WithVaultPath(""),
		"nil getenv":        WithGetenv(nil),
		"nil clock":         WithClock(nil),
		"nil logger":        WithLogger(nil),
		"bad provider":      WithProviders("ok", "not ok"),
		"dotted provider":   WithProviders("a.b"),
		"empty provider id": WithProviders(""),
	} {
		if _, err := buildOptions([]Option{opt}); err == nil {
			t.Errorf("%s: no error", name)
		} else if !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("%s: %v does not wrap engine.ErrInvalidOption", name, err)
		}
	}
	if _, err := Open(); !errors.Is(err, ErrNoVault) {
		t.Errorf("Open() = %v, want ErrNoVault", err)
	}
}

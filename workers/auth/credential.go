package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent"
)

// Bounds of a credential's secrets, in bytes.
const (
	// MaxKeyBytes bounds an API key.
	MaxKeyBytes = 8 << 10
	// MaxTokenBytes bounds an OAuth access or refresh token (JWTs run
	// longer than API keys).
	MaxTokenBytes = 16 << 10
)

// Providers every node knows, with the environment variable their own SDKs
// read.
var wellKnownEnv = map[string]string{
	"anthropic": "ANTHROPIC_API_KEY",
	"openai":    "OPENAI_API_KEY",
}

// KnownProviders are the providers list_providers and status always cover,
// configured or not.
var KnownProviders = []string{"anthropic", "openai"}

// ValidateProvider checks a provider name: an id per agent.ValidateID. The
// error wraps [ErrInvalidProvider] and does not quote the name (a pasted
// key must not come back in an error).
func ValidateProvider(p string) error {
	if err := agent.ValidateID("provider", p); err != nil {
		return fmt.Errorf("%w: provider must be 1 to %d characters of A-Z a-z 0-9 _ -", ErrInvalidProvider, agent.MaxIDLen)
	}
	return nil
}

// ValidateCredential checks c: Type "api_key" needs a Key and nothing
// else; Type "oauth" needs an AccessToken, may have a RefreshToken and an
// ExpiresAt (Unix ms, not negative), and no Key. Secrets are 1 to
// [MaxKeyBytes] (keys) or [MaxTokenBytes] (tokens) bytes of valid UTF-8
// without whitespace or control characters. The error wraps
// [ErrInvalidCredential] and never quotes a secret.
func ValidateCredential(c agent.Credential) error {
	switch c.Type {
	case agent.CredentialAPIKey:
		if err := validSecret("key", c.Key, MaxKeyBytes); err != nil {
			return err
		}
		if c.AccessToken != "" || c.RefreshToken != "" || c.ExpiresAt != 0 {
			return fmt.Errorf("%w: an api_key credential has only a key (no access_token, refresh_token or expires_at)", ErrInvalidCredential)
		}
	case agent.CredentialOAuth:
		if err := validSecret("access_token", c.AccessToken, MaxTokenBytes); err != nil {
			return err
		}
		if c.RefreshToken != "" {
			if err := validSecret("refresh_token", c.RefreshToken, MaxTokenBytes); err != nil {
				return err
			}
		}
		if c.ExpiresAt < 0 {
			return fmt.Errorf("%w: expires_at is negative (want Unix milliseconds)", ErrInvalidCredential)
		}
		if c.Key != "" {
			return fmt.Errorf("%w: an oauth credential has no key", ErrInvalidCredential)
		}
	case "":
		return fmt.Errorf("%w: type is missing (want %q or %q)", ErrInvalidCredential, agent.CredentialAPIKey, agent.CredentialOAuth)
	default:
		return fmt.Errorf("%w: unknown type (want %q or %q)", ErrInvalidCredential, agent.CredentialAPIKey, agent.CredentialOAuth)
	}
	return nil
}

// validSecret checks one secret field; errors name the field and a byte
// offset, never the value.
func validSecret(field, s string, max int) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidCredential, field)
	}
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes, longer than %d", ErrInvalidCredential, field, len(s), max)
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return fmt.Errorf("%w: %s is not valid UTF-8 (byte %d)", ErrInvalidCredential, field, i)
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return fmt.Errorf("%w: %s contains whitespace or a control character at byte %d", ErrInvalidCredential, field, i)
		}
		i += n
	}
	return nil
}

// Fingerprint is the first 8 hex digits of the SHA-256 of c's secret (the
// key, or the access token): enough for a human to tell two credentials
// apart, useless for recovering either.
func Fingerprint(c agent.Credential) string {
	sum := sha256.Sum256([]byte(c.Secret()))
	return hex.EncodeToString(sum[:4])
}

// EnvVar is the iii environment variable of provider:
// "III_<PROVIDER>_API_KEY", upper case, every character outside A-Z 0-9
// replaced by '_' (ollama → III_OLLAMA_API_KEY, my-llm →
// III_MY_LLM_API_KEY).
func EnvVar(provider string) string {
	b := make([]byte, 0, len(provider)+12)
	b = append(b, "III_"...)
	for i := 0; i < len(provider); i++ {
		c := provider[i]
		switch {
		case 'a' <= c && c <= 'z':
			b = append(b, c-'a'+'A')
		case 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
			b = append(b, c)
		default:
			b = append(b, '_')
		}
	}
	return string(append(b, "_API_KEY"...))
}

// EnvVars lists the environment variables that may hold provider's API
// key, the one that wins first: [EnvVar] (iii's own, so a user can give
// iii a key other than the one their shell exports for other tools), then
// the provider's well-known variable (ANTHROPIC_API_KEY, OPENAI_API_KEY)
// if it has one.
func EnvVars(provider string) []string {
	vars := []string{EnvVar(provider)}
	if v, ok := wellKnownEnv[provider]; ok {
		vars = append(vars, v)
	}
	return vars
}

// primaryEnvVar is the variable list_providers names for an unconfigured
// provider: the well-known one when there is one (what users already
// export), else iii's.
func primaryEnvVar(provider string) string {
	if v, ok := wellKnownEnv[provider]; ok {
		return v
	}
	return EnvVar(provider)
}

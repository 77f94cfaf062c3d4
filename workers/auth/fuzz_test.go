package auth

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// FuzzDecodeVault decodes arbitrary bytes as a vault file: no panic;
// every refusal is a plain message; a vault that decodes holds only valid
// entries and survives encode → decode unchanged.
func FuzzDecodeVault(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"credentials":{}}`,
		`{"version":1,"credentials":{"anthropic":{"type":"api_key","key":"sk-1"}}}`,
		`{"version":1,"credentials":{"c":{"type":"oauth","access_token":"a","refresh_token":"r","expires_at":5}}}`,
		`{"version":1,"credentials":{"a.b":{"type":"api_key","key":"k"}}}`,
		`{"version":1,"credentials":{"p":{"type":"api_key","key":"k k"}}}`,
		`{"version":2}`, `{"version":1,"credentials":null}`, `{"version":1,"x":1}`,
		`{`, `[]`, `null`, ``, " \n", "\xff\x00", `{"version":1e400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeVault(data)
		if err != nil {
			return
		}
		for p, c := range m {
			if ValidateProvider(p) != nil || ValidateCredential(c) != nil {
				t.Fatalf("decoded an invalid entry for provider of %d bytes", len(p))
			}
		}
		enc, err := encodeVault(m)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		m2, err := decodeVault(enc)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the vault: %d → %d entries", len(m), len(m2))
		}
	})
}

// FuzzSetTokenRequest decodes arbitrary bytes as a set_token request with
// both codecs, as the handler does: no panic; every refusal is
// invalid_payload and quotes no long secret; a request that validates
// stores and reads back through the vault codec.
func FuzzSetTokenRequest(f *testing.F) {
	for _, s := range []string{
		`{"provider":"anthropic","credential":{"type":"api_key","key":"sk-1"}}`,
		`{"provider":"c","credential":{"type":"oauth","access_token":"a","refresh_token":"r","expires_at":5}}`,
		`{"provider":"p","credential":{"type":"oauth","access_token":"a","expires_at":-1}}`,
		`{"provider":"p","credential":{"type":"bearer","key":"k"}}`,
		`{"provider":"a b","credential":{"type":"api_key","key":"k"}}`,
		`{"provider":"p","credential":{"type":"api_key","key":"0123456789abcdef0123456789 tail"}}`,
		`{"provider":"p","credential":{"type":"api_key","key":5}}`,
		`{"provider":"p","credential":null}`, `null`, `[]`, ``, "\xff",
	} {
		f.Add([]byte(s))
	}
	if b, err := wire.Msgpack.Marshal(SetTokenRequest{Provider: "p", Credential: agent.Credential{Type: "api_key", Key: "k"}}); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
			var r SetTokenRequest
			if err := decodeRequest(codec, data, &r); err != nil {
				if !errors.Is(err, wire.ErrInvalidPayload) {
					t.Fatalf("decode error %v is not invalid_payload", err)
				}
				continue
			}
			err := r.Validate()
			if err != nil {
				if !errors.Is(err, wire.ErrInvalidPayload) {
					t.Fatalf("validate error %v is not invalid_payload", err)
				}
				for _, secret := range []string{r.Credential.Key, r.Credential.AccessToken, r.Credential.RefreshToken, r.Provider} {
					if len(secret) >= 24 && strings.Contains(err.Error(), secret) {
						t.Fatalf("error quotes a secret of %d bytes", len(secret))
					}
				}
				continue
			}
			enc, err := encodeVault(map[string]agent.Credential{r.Provider: r.Credential})
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			m, err := decodeVault(enc)
			if err != nil || m[r.Provider] != r.Credential {
				t.Fatalf("valid request does not round-trip through the vault: %v", err)
			}
		}
	})
}

var envVarRE = regexp.MustCompile(`^III_[A-Z0-9_]+_API_KEY$`)

// FuzzEnvVar: every valid provider maps onto a well-formed variable name of
// predictable length.
func FuzzEnvVar(f *testing.F) {
	for _, s := range []string{"anthropic", "openai", "my-llm", "A_b-9", "", "a.b", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		v := EnvVar(p)
		if ValidateProvider(p) != nil {
			return
		}
		if !envVarRE.MatchString(v) || len(v) != len(p)+len("III__API_KEY") {
			t.Fatalf("EnvVar(%q) = %q", p, v)
		}
		if vs := EnvVars(p); vs[0] != v {
			t.Fatalf("EnvVars(%q) = %v does not start with %q", p, vs, v)
		}
	})
}

package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// GetTokenRequest is the request of auth::get_token; the answer is an
// agent.Credential or null.
type GetTokenRequest struct {
	Provider string `json:"provider"`
}

// Validate checks the request; every error is invalid_payload.
func (r GetTokenRequest) Validate() error { return validateProvider(r.Provider) }

// SetTokenRequest is the request of auth::set_token. Printing it with %v
// does not print the secret (agent.Credential redacts itself).
type SetTokenRequest struct {
	Provider   string           `json:"provider"`
	Credential agent.Credential `json:"credential"`
}

// LogValue never logs the credential's secret (slog's JSON handler would
// marshal the whole request otherwise).
func (r SetTokenRequest) LogValue() slog.Value {
	return slog.GroupValue(slog.String("provider", r.Provider), slog.Any("credential", r.Credential))
}

// Validate checks the request ([ValidateProvider], [ValidateCredential]);
// every error is invalid_payload and none quotes a secret.
func (r SetTokenRequest) Validate() error {
	if err := validateProvider(r.Provider); err != nil {
		return err
	}
	if err := ValidateCredential(r.Credential); err != nil {
		return invalidWrap(err)
	}
	return nil
}

// SetTokenResponse is the answer of auth::set_token: {"ok":true}.
type SetTokenResponse struct {
	OK bool `json:"ok"`
}

// DeleteTokenRequest is the request of auth::delete_token.
type DeleteTokenRequest struct {
	Provider string `json:"provider"`
}

// Validate checks the request; every error is invalid_payload.
func (r DeleteTokenRequest) Validate() error { return validateProvider(r.Provider) }

// DeleteTokenResponse is the answer of auth::delete_token: whether the
// vault had a credential for the provider.
type DeleteTokenResponse struct {
	Deleted bool `json:"deleted"`
}

// StatusRequest is the request of auth::status. Provider asks for that
// provider alone (no paging); without it the answer covers every provider
// list_providers covers, a page at a time: After continues a truncated
// answer from the provider it names.
type StatusRequest struct {
	Provider string `json:"provider,omitempty"`
	// After is the last provider of the previous, truncated answer: only
	// providers that sort after it are listed. Not with Provider.
	After string `json:"after,omitempty"`
}

// Validate checks the request; every error is invalid_payload.
func (r StatusRequest) Validate() error {
	if r.After != "" {
		if r.Provider != "" {
			return invalidWrap(errors.New("auth: provider and after exclude each other (after pages the list of every provider)"))
		}
		return validateAfter(r.After)
	}
	if r.Provider == "" {
		return nil
	}
	return validateProvider(r.Provider)
}

// ProviderStatus describes the credential in effect for one provider,
// without its secret. EnvVar is set for Source "env"; ExpiresAt (Unix ms)
// and Expired for an OAuth credential with an expiry; HasRefreshToken for
// an OAuth credential.
type ProviderStatus struct {
	Provider        string `json:"provider"`
	Source          string `json:"source"`
	Type            string `json:"type"`
	EnvVar          string `json:"env_var,omitempty"`
	ExpiresAt       int64  `json:"expires_at,omitempty"`
	Expired         *bool  `json:"expired,omitempty"`
	HasRefreshToken *bool  `json:"has_refresh_token,omitempty"`
	Fingerprint     string `json:"fingerprint"`
}

// StatusResponse is the answer of auth::status; Providers is never null.
type StatusResponse struct {
	Providers []ProviderStatus `json:"providers"`
	// Truncated says more providers follow that did not fit the server's
	// max payload: ask again with After set to the last provider.
	Truncated bool `json:"truncated,omitempty"`
}

// ListProvidersRequest is the request of auth::list_providers; every field
// is optional.
type ListProvidersRequest struct {
	// After is the last provider of the previous, truncated answer: only
	// providers that sort after it are listed.
	After string `json:"after,omitempty"`
}

// Validate checks the request; every error is invalid_payload.
func (r ListProvidersRequest) Validate() error {
	if r.After == "" {
		return nil
	}
	return validateAfter(r.After)
}

// ProviderInfo is one provider of auth::list_providers: the environment
// variable that supplies its key (or would: the well-known one when it has
// one), and whether the vault or the environment has a credential.
type ProviderInfo struct {
	Provider   string `json:"provider"`
	EnvVar     string `json:"env_var"`
	Configured bool   `json:"configured"`
}

// ListProvidersResponse is the answer of auth::list_providers, sorted by
// provider; Providers is never null.
type ListProvidersResponse struct {
	Providers []ProviderInfo `json:"providers"`
	// Truncated says more providers follow that did not fit the server's
	// max payload: ask again with After set to the last provider.
	Truncated bool `json:"truncated,omitempty"`
}

func validateProvider(p string) error {
	if err := ValidateProvider(p); err != nil {
		return invalidWrap(err)
	}
	return nil
}

// validateAfter checks a paging cursor: a provider id, named "after" in
// the error and, like a provider, never quoted.
func validateAfter(a string) error {
	if err := agent.ValidateID("after", a); err != nil {
		return invalidWrap(fmt.Errorf("%w: after must be 1 to %d characters of A-Z a-z 0-9 _ -", ErrInvalidProvider, agent.MaxIDLen))
	}
	return nil
}

// typed adapts fn into a handler like engine.Typed, except that a payload
// that does not decode is described without quoting it: the payload of
// auth::set_token is a secret, and the decoders' messages may echo input.
func typed[Req, Resp any](fn func(ctx context.Context, req Req) (Resp, error)) engine.Handler {
	return typedCodec(func(ctx context.Context, req Req, _ wire.Codec) (Resp, error) { return fn(ctx, req) })
}

// typedCodec is [typed] for a handler that needs the request's codec,
// which is the reply's: the paged answers measure themselves in it.
func typedCodec[Req, Resp any](fn func(ctx context.Context, req Req, codec wire.Codec) (Resp, error)) engine.Handler {
	return func(ctx context.Context, r *engine.Request) (any, error) {
		var req Req
		if err := decodeRequest(r.Codec, r.Data, &req); err != nil {
			return nil, err
		}
		if v, ok := any(req).(engine.Validator); ok {
			if err := v.Validate(); err != nil {
				var we *wire.Error
				if errors.As(err, &we) {
					return nil, we
				}
				return nil, invalidWrap(err)
			}
		}
		resp, err := fn(ctx, req, r.Codec)
		if err != nil {
			return nil, err
		}
		return resp, nil
	}
}

// decodeRequest decodes data with codec into v; a failure is
// invalid_payload naming the codec and, for JSON, the byte offset and
// field, never the input.
func decodeRequest(codec wire.Codec, data []byte, v any) error {
	err := codec.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	if codec.ContentType() == wire.ContentJSON {
		return wire.Errorf(wire.CodeInvalidPayload, "payload does not decode as %s: %s", wire.ContentJSON, describeJSONError(err, true))
	}
	return wire.Errorf(wire.CodeInvalidPayload, "payload does not decode as %s", codec.ContentType())
}

const providerSchema = `{"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$"}`

const getTokenRequestSchema = `{
  "type": "object",
  "properties": {"provider": ` + providerSchema + `},
  "required": ["provider"]
}`

const credentialSchema = `{
  "oneOf": [
    {
      "type": "object",
      "properties": {
        "type": {"const": "api_key"},
        "key": {"type": "string", "minLength": 1, "maxLength": 8192, "pattern": "^\\S+$"}
      },
      "required": ["type", "key"]
    },
    {
      "type": "object",
      "properties": {
        "type": {"const": "oauth"},
        "access_token": {"type": "string", "minLength": 1, "maxLength": 16384, "pattern": "^\\S+$"},
        "refresh_token": {"type": "string", "maxLength": 16384, "pattern": "^\\S*$"},
        "expires_at": {"type": "integer", "minimum": 0, "description": "Unix milliseconds"}
      },
      "required": ["type", "access_token"]
    }
  ]
}`

const getTokenResponseSchema = `{
  "oneOf": [{"type": "null"}, ` + credentialSchema + `]
}`

const setTokenRequestSchema = `{
  "type": "object",
  "properties": {
    "provider": ` + providerSchema + `,
    "credential": ` + credentialSchema + `
  },
  "required": ["provider", "credential"]
}`

const setTokenResponseSchema = `{
  "type": "object",
  "properties": {"ok": {"const": true}},
  "required": ["ok"]
}`

const deleteTokenRequestSchema = getTokenRequestSchema

const deleteTokenResponseSchema = `{
  "type": "object",
  "properties": {"deleted": {"type": "boolean"}},
  "required": ["deleted"]
}`

const statusRequestSchema = `{
  "type": "object",
  "properties": {
    "provider": ` + providerSchema + `,
    "after": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$", "description": "the last provider of a truncated answer: list those after it; not with provider"}
  },
  "not": {"required": ["provider", "after"]}
}`

const statusResponseSchema = `{
  "type": "object",
  "properties": {
    "providers": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "provider": {"type": "string"},
          "source": {"enum": ["vault", "env"]},
          "type": {"enum": ["api_key", "oauth"]},
          "env_var": {"type": "string"},
          "expires_at": {"type": "integer", "description": "Unix milliseconds"},
          "expired": {"type": "boolean"},
          "has_refresh_token": {"type": "boolean"},
          "fingerprint": {"type": "string", "pattern": "^[0-9a-f]{8}$", "description": "first 8 hex digits of the SHA-256 of the secret"}
        },
        "required": ["provider", "source", "type", "fingerprint"]
      }
    },
    "truncated": {"type": "boolean", "description": "more providers follow: ask again with after = the last provider"}
  },
  "required": ["providers"]
}`

const listProvidersRequestSchema = `{
  "type": "object",
  "properties": {
    "after": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$", "description": "the last provider of a truncated answer: list those after it"}
  }
}`

const listProvidersResponseSchema = `{
  "type": "object",
  "properties": {
    "providers": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "provider": {"type": "string"},
          "env_var": {"type": "string"},
          "configured": {"type": "boolean"}
        },
        "required": ["provider", "env_var", "configured"]
      }
    },
    "truncated": {"type": "boolean", "description": "more providers follow: ask again with after = the last provider"}
  },
  "required": ["providers"]
}`

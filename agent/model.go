package agent

import "log/slog"

// Model is one entry of the model catalog (SPEC §4 models): what a model
// can do and what it costs. Prices are USD per million tokens.
type Model struct {
	ID              string  `json:"id"`
	Provider        string  `json:"provider"`
	DisplayName     string  `json:"display_name,omitempty"`
	ContextWindow   int     `json:"context_window"`
	MaxOutputTokens int     `json:"max_output_tokens"`
	SupportsTools   bool    `json:"supports_tools"`
	SupportsVision  bool    `json:"supports_vision"`
	SupportsThink   bool    `json:"supports_thinking"`
	SupportsCache   bool    `json:"supports_cache"`
	Pricing         Pricing `json:"pricing"`
}

// Pricing is a model's price in USD per million tokens.
type Pricing struct {
	InputPer1M      float64 `json:"input_per_1m"`
	OutputPer1M     float64 `json:"output_per_1m"`
	CacheReadPer1M  float64 `json:"cache_read_per_1m,omitempty"`
	CacheWritePer1M float64 `json:"cache_write_per_1m,omitempty"`
}

// Capabilities a request may need (models::supports).
const (
	CapabilityTools    = "tools"
	CapabilityVision   = "vision"
	CapabilityThinking = "thinking"
	CapabilityCache    = "cache"
)

// Supports reports whether m has capability c (one of the Capability*
// constants; anything else is false).
func (m Model) Supports(c string) bool {
	switch c {
	case CapabilityTools:
		return m.SupportsTools
	case CapabilityVision:
		return m.SupportsVision
	case CapabilityThinking:
		return m.SupportsThink
	case CapabilityCache:
		return m.SupportsCache
	}
	return false
}

// Cost is the USD cost of usage at p. Input tokens are the uncached ones;
// cache reads and writes are priced on their own (at the input price when
// the model has no cache price).
func (p Pricing) Cost(u Usage) float64 {
	cr, cw := p.CacheReadPer1M, p.CacheWritePer1M
	if cr == 0 {
		cr = p.InputPer1M
	}
	if cw == 0 {
		cw = p.InputPer1M
	}
	// A negative count (a provider's or a foreign client's usage) counts
	// as none: a cost is never negative, so it never refunds a budget.
	tokens := func(n int64) float64 { return float64(max(n, 0)) }
	return (tokens(u.InputTokens)*p.InputPer1M + tokens(u.OutputTokens)*p.OutputPer1M +
		tokens(u.CacheReadTokens)*cr + tokens(u.CacheWriteTokens)*cw) / 1e6
}

// Credential is what auth::get_token returns for a provider: an API key
// (Type "api_key", Key) or OAuth tokens (Type "oauth", AccessToken,
// RefreshToken, ExpiresAt in Unix milliseconds). It is a secret: never put
// it in an event, a log line, a span attribute or an error.
type Credential struct {
	Type         string `json:"type"`
	Key          string `json:"key,omitempty"`
	AccessToken  string `json:"access_token,omitempty"`
	RefreshToken string `json:"refresh_token,omitempty"`
	ExpiresAt    int64  `json:"expires_at,omitempty"`
}

// Credential types.
const (
	CredentialAPIKey = "api_key"
	CredentialOAuth  = "oauth"
)

// Secret is the value a provider sends: the key or the access token.
func (c Credential) Secret() string {
	if c.Type == CredentialOAuth {
		return c.AccessToken
	}
	return c.Key
}

// String never prints the secret.
func (c Credential) String() string { return "Credential{" + c.Type + ", [redacted]}" }

// GoString never prints the secret (%#v).
func (c Credential) GoString() string { return c.String() }

// LogValue never logs the secret: slog resolves it before any handler
// (the JSON handler would otherwise marshal the fields).
func (c Credential) LogValue() slog.Value { return slog.StringValue(c.String()) }

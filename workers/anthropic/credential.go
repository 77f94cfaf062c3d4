package anthropic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// authTimeout bounds one auth::get_token call.
const authTimeout = 5 * time.Second

// credentials fetches the Anthropic credential and caches it for a while:
// auth::get_token {provider: "anthropic"} first, the API key variable of
// the environment when the auth worker is not running or has none.
type credentials struct {
	ttl       time.Duration
	now       func() time.Time
	lookupEnv func(string) (string, bool)
	envName   string

	mu      sync.Mutex
	cred    agent.Credential
	fetched time.Time
	valid   bool
}

// authRequest is auth::get_token's payload.
type authRequest struct {
	Provider string `json:"provider"`
}

// get returns the credential, and whether it came from the cache (one
// fetched for this call is as fresh as auth::get_token can make it). No
// credential anywhere is an auth_expired failure; an auth worker that
// fails is a transient one.
func (c *credentials) get(ctx context.Context, e *engine.Engine) (agent.Credential, bool, error) {
	now := c.now()
	c.mu.Lock()
	if c.valid && now.Sub(c.fetched) < c.ttl && !expired(c.cred, now) {
		cred := c.cred
		c.mu.Unlock()
		return cred, true, nil
	}
	c.mu.Unlock()

	cred, err := c.fetch(ctx, e)
	if err != nil {
		return agent.Credential{}, false, err
	}
	c.mu.Lock()
	c.cred, c.fetched, c.valid = cred, now, true
	c.mu.Unlock()
	return cred, false, nil
}

func (c *credentials) fetch(ctx context.Context, e *engine.Engine) (agent.Credential, error) {
	ctx, cancel := context.WithTimeout(ctx, authTimeout)
	defer cancel()
	var got *agent.Credential
	err := e.Trigger(ctx, AuthFunction, authRequest{Provider: ProviderName}, &got)
	switch {
	case err == nil && got != nil && got.Secret() != "":
		if got.Type != agent.CredentialOAuth {
			got.Type = agent.CredentialAPIKey
		}
		return *got, nil
	case err == nil, errors.Is(err, wire.ErrFunctionNotFound):
		// No auth worker, or no token stored: the node's environment.
		if key, ok := c.lookupEnv(c.envName); ok && key != "" {
			return agent.Credential{Type: agent.CredentialAPIKey, Key: key}, nil
		}
		return agent.Credential{}, &failure{
			kind:  agent.ErrorAuthExpired,
			text:  fmt.Sprintf("anthropic: no credential: store one with auth::set_token {provider: %q} or set %s", ProviderName, c.envName),
			cause: ErrNoCredential,
		}
	case ctx.Err() != nil && context.Cause(ctx) != context.DeadlineExceeded:
		return agent.Credential{}, context.Cause(ctx)
	default:
		return agent.Credential{}, &failure{
			kind:  agent.ErrorTransient,
			text:  "anthropic: " + AuthFunction + " failed: " + wire.From(err).Message,
			cause: err,
		}
	}
}

// invalidate drops the cached credential when it is still stale, the one
// the API refused (a 401): a credential another call has cached since is
// kept.
func (c *credentials) invalidate(stale agent.Credential) {
	c.mu.Lock()
	if c.cred.Secret() == stale.Secret() {
		c.valid = false
		c.cred = agent.Credential{}
	}
	c.mu.Unlock()
}

// expired reports whether an OAuth token's expiry has passed.
func expired(c agent.Credential, now time.Time) bool {
	return c.Type == agent.CredentialOAuth && c.ExpiresAt > 0 && now.UnixMilli() >= c.ExpiresAt
}

// authorized runs do, one request of op, with the credential. Whatever do
// fails with as auth_expired drops the credential it used. A 401 to a
// cached credential asks for the credential again, once: an operator who
// replaced the key with auth::set_token and revoked the old one within the
// TTL should not fail a call. When the secret changed, do runs once more
// with the new one, unless written reports that events went out; when it
// did not, the 401 stands.
func (p *Provider) authorized(ctx context.Context, e *engine.Engine, log *slog.Logger, op string, written func() bool, do func(agent.Credential) error) error {
	cred, cached, err := p.creds.get(ctx, e)
	if err != nil {
		return err
	}
	err = do(cred)
	var f *failure
	if !errors.As(err, &f) || f.kind != agent.ErrorAuthExpired {
		return err
	}
	p.creds.invalidate(cred)
	if !cached || f.status != http.StatusUnauthorized || written() || ctx.Err() != nil {
		return err
	}
	fresh, _, ferr := p.creds.get(ctx, e)
	if ferr != nil || fresh.Secret() == cred.Secret() {
		p.creds.invalidate(cred)
		return err
	}
	log.Info("anthropic: the API refused the cached credential and auth has another, retrying with it", "op", op, "status", f.status)
	err = do(fresh)
	if errors.As(err, &f) && f.kind == agent.ErrorAuthExpired {
		p.creds.invalidate(fresh)
	}
	return err
}

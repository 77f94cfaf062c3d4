package auth

import (
	"errors"
	"log/slog"
	"strings"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Sources of a credential, as status reports them.
const (
	SourceVault = "vault"
	SourceEnv   = "env"
)

// Store answers the auth functions: it reads credentials from a [Vault]
// first and from the environment second, and writes only the vault. Its
// methods return *wire.Error values (invalid_payload for bad input,
// internal for a vault that is unreadable, too open or corrupt, with the
// Go sentinel kept for errors.Is). It is safe for concurrent use.
type Store struct {
	vault *Vault
	o     options
	log   *slog.Logger
}

// Open opens the vault of [WithVaultPath] (required: [ErrNoVault]
// otherwise) and returns a store over it and the environment.
func Open(opts ...Option) (*Store, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	v, err := OpenVault(o.vaultPath)
	if err != nil {
		return nil, err
	}
	return newStore(v, o), nil
}

func newStore(v *Vault, o options) *Store {
	log := o.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{vault: v, o: o, log: log}
}

// Vault is the store's vault.
func (s *Store) Vault() *Vault { return s.vault }

// found is a credential and where it came from.
type found struct {
	cred   agent.Credential
	source string
	envVar string // source env only
}

// snapshot reads the whole vault once, so one answer sees one version of
// it.
func (s *Store) snapshot() (map[string]agent.Credential, error) {
	m, err := s.vault.All()
	if err != nil {
		return nil, vaultErr(err)
	}
	return m, nil
}

// lookup finds provider's credential: the vault snapshot, then [EnvVars]
// in order. An environment value is trimmed of surrounding whitespace; one
// that is still not a valid API key is skipped with a warning naming the
// variable.
func (s *Store) lookup(vault map[string]agent.Credential, provider string) (found, bool) {
	if c, ok := vault[provider]; ok {
		return found{cred: c, source: SourceVault}, true
	}
	for _, name := range EnvVars(provider) {
		v := strings.TrimSpace(s.o.getenv(name))
		if v == "" {
			continue
		}
		c := agent.Credential{Type: agent.CredentialAPIKey, Key: v}
		if err := ValidateCredential(c); err != nil {
			s.log.Warn("environment credential ignored", "provider", provider, "env_var", name, "reason", err.Error())
			continue
		}
		return found{cred: c, source: SourceEnv, envVar: name}, true
	}
	return found{}, false
}

// Token returns provider's credential, or nil when neither the vault nor
// the environment has one. An OAuth credential past its expires_at is
// returned as it is: the provider then reports auth_expired and a human
// stores fresh tokens (there is no refresh flow).
func (s *Store) Token(provider string) (*agent.Credential, error) {
	if err := ValidateProvider(provider); err != nil {
		return nil, invalidWrap(err)
	}
	m, err := s.snapshot()
	if err != nil {
		return nil, err
	}
	f, ok := s.lookup(m, provider)
	if !ok {
		s.log.Debug("no credential", "provider", provider)
		return nil, nil
	}
	s.log.Debug("credential served", "provider", provider, "source", f.source, "type", f.cred.Type, "fingerprint", Fingerprint(f.cred))
	c := f.cred
	return &c, nil
}

// SetToken stores c as provider's credential in the vault.
func (s *Store) SetToken(provider string, c agent.Credential) error {
	if err := ValidateProvider(provider); err != nil {
		return invalidWrap(err)
	}
	if err := ValidateCredential(c); err != nil {
		return invalidWrap(err)
	}
	if err := s.vault.Set(provider, c); err != nil {
		if errors.Is(err, ErrVaultFull) {
			return invalidWrap(err)
		}
		return vaultErr(err)
	}
	s.log.Info("credential stored", "provider", provider, "type", c.Type, "fingerprint", Fingerprint(c))
	return nil
}

// DeleteToken removes provider's credential from the vault and reports
// whether there was one. The environment is not the vault's to change: a
// provider whose key comes from the environment keeps it.
func (s *Store) DeleteToken(provider string) (bool, error) {
	if err := ValidateProvider(provider); err != nil {
		return false, invalidWrap(err)
	}
	ok, err := s.vault.Delete(provider)
	if err != nil {
		return false, vaultErr(err)
	}
	s.log.Info("credential deleted", "provider", provider, "deleted", ok)
	return ok, nil
}

// Status describes the credential in effect for provider, or for every
// provider [Store.ListProviders] covers when provider is "": never a
// secret, only its [Fingerprint]. Providers without a credential are left
// out; the result is sorted and never nil.
func (s *Store) Status(provider string) ([]ProviderStatus, error) {
	if provider != "" {
		if err := ValidateProvider(provider); err != nil {
			return nil, invalidWrap(err)
		}
	}
	m, err := s.snapshot()
	if err != nil {
		return nil, err
	}
	names := []string{provider}
	if provider == "" {
		names = s.providers(m)
	}
	out := make([]ProviderStatus, 0, len(names))
	for _, p := range names {
		if st, ok := s.statusOf(m, p); ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// statusPage answers auth::status without a provider: the statuses of the
// providers after r.After, sorted, that fit maxPayload in codec.
func (s *Store) statusPage(r StatusRequest, codec wire.Codec, maxPayload int64) (StatusResponse, error) {
	m, err := s.snapshot()
	if err != nil {
		return StatusResponse{}, err
	}
	page, truncated, err := fitPage(codec, namesAfter(s.providers(m), r.After), maxPayload, func(p string) (ProviderStatus, bool) {
		return s.statusOf(m, p)
	})
	return StatusResponse{Providers: page, Truncated: truncated}, err
}

// statusOf is the status of provider's credential in the vault snapshot m
// or the environment, false when it has none.
func (s *Store) statusOf(m map[string]agent.Credential, provider string) (ProviderStatus, bool) {
	f, ok := s.lookup(m, provider)
	if !ok {
		return ProviderStatus{}, false
	}
	return s.status(provider, f), true
}

func (s *Store) status(provider string, f found) ProviderStatus {
	st := ProviderStatus{
		Provider:    provider,
		Source:      f.source,
		Type:        f.cred.Type,
		EnvVar:      f.envVar,
		Fingerprint: Fingerprint(f.cred),
	}
	if f.cred.Type == agent.CredentialOAuth {
		hasRefresh := f.cred.RefreshToken != ""
		st.HasRefreshToken = &hasRefresh
		if f.cred.ExpiresAt > 0 {
			st.ExpiresAt = f.cred.ExpiresAt
			expired := s.o.now().UnixMilli() >= f.cred.ExpiresAt
			st.Expired = &expired
		}
	}
	return st
}

// ListProviders lists [KnownProviders], those of [WithProviders] and every
// provider in the vault, sorted, with the environment variable that
// supplies (or would supply) each one's key and whether it has a
// credential.
func (s *Store) ListProviders() ([]ProviderInfo, error) {
	m, err := s.snapshot()
	if err != nil {
		return nil, err
	}
	names := s.providers(m)
	out := make([]ProviderInfo, 0, len(names))
	for _, p := range names {
		out = append(out, s.infoOf(m, p))
	}
	return out, nil
}

// listProvidersPage answers auth::list_providers: the providers after
// r.After, sorted, that fit maxPayload in codec.
func (s *Store) listProvidersPage(r ListProvidersRequest, codec wire.Codec, maxPayload int64) (ListProvidersResponse, error) {
	m, err := s.snapshot()
	if err != nil {
		return ListProvidersResponse{}, err
	}
	page, truncated, err := fitPage(codec, namesAfter(s.providers(m), r.After), maxPayload, func(p string) (ProviderInfo, bool) {
		return s.infoOf(m, p), true
	})
	return ListProvidersResponse{Providers: page, Truncated: truncated}, err
}

// infoOf is provider's entry of list_providers over the vault snapshot m.
func (s *Store) infoOf(m map[string]agent.Credential, provider string) ProviderInfo {
	f, ok := s.lookup(m, provider)
	envVar := primaryEnvVar(provider)
	if ok && f.source == SourceEnv {
		envVar = f.envVar
	}
	return ProviderInfo{Provider: provider, EnvVar: envVar, Configured: ok}
}

// providers is the sorted union of the known providers and the vault's.
func (s *Store) providers(vault map[string]agent.Credential) []string {
	set := make(map[string]struct{}, len(KnownProviders)+len(s.o.providers)+len(vault))
	for _, group := range [][]string{KnownProviders, s.o.providers} {
		for _, p := range group {
			set[p] = struct{}{}
		}
	}
	for p := range vault {
		set[p] = struct{}{}
	}
	return sortedKeys(set)
}

package auth

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Option configures a [Store] (and the [Worker] that opens one).
type Option func(*options) error

type options struct {
	vaultPath string
	getenv    func(string) string
	now       func() time.Time
	logger    *slog.Logger // nil: the engine's logger
	providers []string     // known providers beyond KnownProviders
}

func buildOptions(opts []Option) (options, error) {
	o := options{getenv: os.Getenv, now: time.Now}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	return o, nil
}

// WithVaultPath sets the vault file (default: the "vault" setting, else
// <home>/auth/credentials.json). Its directory must be private (0700) or
// not exist yet.
func WithVaultPath(path string) Option {
	return func(o *options) error {
		if path == "" {
			return fmt.Errorf("%w: empty vault path", engine.ErrInvalidOption)
		}
		o.vaultPath = path
		return nil
	}
}

// WithGetenv sets how the environment is read (default os.Getenv). It is
// called at every request, so a key exported after the worker started is
// seen without a restart.
func WithGetenv(getenv func(string) string) Option {
	return func(o *options) error {
		if getenv == nil {
			return fmt.Errorf("%w: nil getenv", engine.ErrInvalidOption)
		}
		o.getenv = getenv
		return nil
	}
}

// WithClock sets the clock that decides whether an OAuth token has expired
// (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", engine.ErrInvalidOption)
		}
		o.now = now
		return nil
	}
}

// WithLogger sets the logger (default: the engine's, with worker=auth).
// Log lines name providers, sources and fingerprints, never secrets.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", engine.ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// WithProviders adds providers (ids per [ValidateProvider]) that status
// and list_providers always cover, beside [KnownProviders] and the vault's:
// typically the OpenAI-compatible servers a node talks to ("ollama").
func WithProviders(providers ...string) Option {
	return func(o *options) error {
		for _, p := range providers {
			if err := ValidateProvider(p); err != nil {
				return fmt.Errorf("%w: %w", engine.ErrInvalidOption, err)
			}
		}
		o.providers = append(o.providers, providers...)
		return nil
	}
}

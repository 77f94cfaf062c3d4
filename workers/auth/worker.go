package auth

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "auth"

// Function ids the worker serves.
const (
	GetTokenFunction      = "auth::get_token"
	SetTokenFunction      = "auth::set_token"
	DeleteTokenFunction   = "auth::delete_token"
	StatusFunction        = "auth::status"
	ListProvidersFunction = "auth::list_providers"
)

// Settings of the module (workers.Env.Settings["auth"]).
const (
	// SettingVault is the vault file's path; a relative path is relative
	// to the node's home. Default <home>/auth/credentials.json.
	SettingVault = "vault"
	// SettingProviders is a comma-separated list of providers status and
	// list_providers always cover ([WithProviders]), e.g. "ollama,vllm".
	SettingProviders = "providers"
)

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "credentials: auth::get_token, ::set_token, ::delete_token, ::status, ::list_providers over a private vault file and the environment",
		New:         func() workers.Worker { return &Worker{} },
	})
}

var (
	_ workers.Worker      = (*Worker)(nil)
	_ workers.Provisioner = (*Worker)(nil)
	_ workers.Closer      = (*Worker)(nil)
)

// Worker serves a [Store] on the bus as the five auth functions of the
// engine worker "auth".
type Worker struct {
	opts []Option

	eps workers.Endpoints

	mu       sync.Mutex
	settings []Option // from Provision, applied before opts
	vault    *Vault   // opened by Provision, or by Start
	store    *Store
}

// NewWorker returns a worker whose store is opened with opts; options win
// over settings. The module registry builds one with no options.
func NewWorker(opts ...Option) *Worker { return &Worker{opts: opts} }

// Provision reads the settings ([SettingVault], [SettingProviders]; any
// other is an error) and opens the vault, so a vault that is too open or
// corrupt stops the node before anything is registered.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	settings := env.Settings[WorkerName]
	keys := slices.Sorted(maps.Keys(settings))
	var opts []Option
	path := ""
	if env.Home != "" {
		path = DefaultVaultPath(env.Home)
	}
	for _, k := range keys {
		v := settings[k]
		switch k {
		case SettingVault:
			if v == "" {
				return fmt.Errorf("%w: %s %s is empty", engine.ErrInvalidOption, WorkerName, k)
			}
			path = v
			if !filepath.IsAbs(v) && env.Home != "" {
				path = filepath.Join(env.Home, v)
			}
		case SettingProviders:
			var ps []string
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p != "" {
					ps = append(ps, p)
				}
			}
			opts = append(opts, WithProviders(ps...))
		default:
			return fmt.Errorf("%w: %s has no setting %q (want %s or %s)", engine.ErrInvalidOption, WorkerName, k, SettingVault, SettingProviders)
		}
	}
	if path != "" {
		opts = append(opts, WithVaultPath(path))
	}
	o, err := buildOptions(append(opts, w.opts...))
	if err != nil {
		return err
	}
	v, err := OpenVault(o.vaultPath)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.settings = opts
	w.vault = v
	return nil
}

// Store is the worker's store, nil before Start.
func (w *Worker) Store() *Store {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.store
}

// Start opens the vault (unless Provision did) and registers the five
// functions on e. It returns [ErrNoVault] when no vault path is known,
// [ErrInsecureVault] or [ErrCorruptVault] for a vault it refuses,
// [ErrStarted] when called twice and engine.ErrClosed after Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	return w.eps.Start(ctx, e, WorkerName, "credentials for model providers: a private vault file, then the environment", func() ([]engine.Function, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		opts := append([]Option{WithLogger(e.Logger().With("worker", WorkerName))}, w.settings...)
		o, err := buildOptions(append(opts, w.opts...))
		if err != nil {
			return nil, err
		}
		v := w.vault
		if v == nil {
			if v, err = OpenVault(o.vaultPath); err != nil {
				return nil, err
			}
			w.vault = v
		}
		w.store = newStore(v, o)
		return w.store.functions(e.Conn().MaxPayload), nil
	})
}

// Close stops the endpoints, waiting for calls in flight until ctx ends.
// The vault file stays. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error { return w.eps.Close(ctx, nil) }

// functions are the five functions over s; the paged ones measure their
// answers against maxPayload, read at every call (a reconnect may land on
// a server with another limit).
func (s *Store) functions(maxPayload func() int64) []engine.Function {
	return []engine.Function{
		{
			ID:             GetTokenFunction,
			Description:    "Return a provider's credential ({type:\"api_key\", key} or {type:\"oauth\", access_token, refresh_token?, expires_at?}) from the vault, else the environment (III_<PROVIDER>_API_KEY, then ANTHROPIC_API_KEY/OPENAI_API_KEY), or null. Expired OAuth tokens are returned as they are. Human-only: a model can never call it.",
			RequestSchema:  getTokenRequestSchema,
			ResponseSchema: getTokenResponseSchema,
			Idempotent:     true,
			Handler: typed(func(_ context.Context, req GetTokenRequest) (*agent.Credential, error) {
				return s.Token(req.Provider)
			}),
		},
		{
			ID:             SetTokenFunction,
			Description:    "Store a provider's credential in the vault, replacing any (api_key: key without whitespace, at most 8 KiB; oauth: access_token, refresh_token?, expires_at? in Unix ms). Human-only.",
			RequestSchema:  setTokenRequestSchema,
			ResponseSchema: setTokenResponseSchema,
			Handler: typed(func(_ context.Context, req SetTokenRequest) (SetTokenResponse, error) {
				if err := s.SetToken(req.Provider, req.Credential); err != nil {
					return SetTokenResponse{}, err
				}
				return SetTokenResponse{OK: true}, nil
			}),
		},
		{
			ID:             DeleteTokenFunction,
			Description:    "Remove a provider's credential from the vault; {deleted:false} when it had none. Keys in the environment stay. Human-only.",
			RequestSchema:  deleteTokenRequestSchema,
			ResponseSchema: deleteTokenResponseSchema,
			Handler: typed(func(_ context.Context, req DeleteTokenRequest) (DeleteTokenResponse, error) {
				ok, err := s.DeleteToken(req.Provider)
				if err != nil {
					return DeleteTokenResponse{}, err
				}
				return DeleteTokenResponse{Deleted: ok}, nil
			}),
		},
		{
			ID:             StatusFunction,
			Description:    "Describe the credential in effect for one provider or all: source (vault or env), type, env_var, expiry, and a fingerprint (8 hex digits of its SHA-256). Never a secret. All of them come in pages that fit the max payload: truncated says more follow, ask again with after = the last provider.",
			RequestSchema:  statusRequestSchema,
			ResponseSchema: statusResponseSchema,
			Idempotent:     true,
			Handler: typedCodec(func(_ context.Context, req StatusRequest, codec wire.Codec) (StatusResponse, error) {
				if req.Provider == "" {
					return s.statusPage(req, codec, maxPayload())
				}
				ps, err := s.Status(req.Provider)
				if err != nil {
					return StatusResponse{}, err
				}
				return StatusResponse{Providers: ps}, nil
			}),
		},
		{
			ID:             ListProvidersFunction,
			Description:    "List the known providers (anthropic, openai, configured extras) and every provider in the vault, with the environment variable of each and whether it has a credential. In pages that fit the max payload: truncated says more follow, ask again with after = the last provider.",
			RequestSchema:  listProvidersRequestSchema,
			ResponseSchema: listProvidersResponseSchema,
			Idempotent:     true,
			Handler: typedCodec(func(_ context.Context, req ListProvidersRequest, codec wire.Codec) (ListProvidersResponse, error) {
				return s.listProvidersPage(req, codec, maxPayload())
			}),
		},
	}
}

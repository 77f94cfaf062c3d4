package models

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/internal/answer"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "models"

// SettingFile is the module's one setting
// (workers.Env.Settings["models"]["file"]): an override file in the format
// of catalog.json, relative to workers.Env.Home unless absolute
// ([WithCatalogFile]).
const SettingFile = "file"

// reconcileSlack is the time models::reconcile has, beyond the provider
// call, to read and write the bucket.
const reconcileSlack = 30 * time.Second

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "model catalog: models::list, models::get, models::supports, models::reconcile (embedded catalog + KV overlay)",
		New:         func() workers.Worker { return &Worker{} },
	})
}

var (
	_ workers.Worker      = (*Worker)(nil)
	_ workers.Provisioner = (*Worker)(nil)
	_ workers.Closer      = (*Worker)(nil)
)

// Worker serves a [Store] on the bus as the four models functions of the
// engine worker "models".
type Worker struct {
	opts []Option

	served workers.Served[*Store]
}

// NewWorker returns a worker whose store is opened with opts at Start. The
// module registry builds one with no options.
func NewWorker(opts ...Option) *Worker { return &Worker{opts: opts} }

// Provision reads the module's settings: [SettingFile] adds an override
// file, read and checked now, so a bad file fails the node before it
// starts. Any other setting is an error.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	settings := env.Settings[WorkerName]
	keys := slices.Sorted(maps.Keys(settings))
	for _, k := range keys {
		v := settings[k]
		switch k {
		case SettingFile:
			if v == "" {
				return fmt.Errorf("%w: %s %s is empty", engine.ErrInvalidOption, WorkerName, k)
			}
			path := v
			if !filepath.IsAbs(path) {
				path = filepath.Join(env.Home, path)
			}
			w.opts = append(w.opts, WithCatalogFile(path))
		default:
			return fmt.Errorf("%w: %s has no setting %q (want %s)", engine.ErrInvalidOption, WorkerName, k, SettingFile)
		}
	}
	// Apply the options now: the file is read and checked here.
	o, err := buildOptions(w.opts)
	if err != nil {
		return err
	}
	if _, err := o.catalog(); err != nil {
		return fmt.Errorf("%w: %w", engine.ErrInvalidOption, err)
	}
	return nil
}

// Store is the worker's store, nil before Start.
func (w *Worker) Store() *Store {
	s, _ := w.served.Resource()
	return s
}

// Start opens the store (creating the bucket when missing, loading its
// records) and registers the four functions on e. It returns [ErrStarted]
// when called twice and engine.ErrClosed after Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	return w.served.Start(ctx, e, WorkerName, "model catalog: what each model can do and what it costs", func() (*Store, []engine.Function, error) {
		s, err := Open(ctx, e, w.opts...)
		if err != nil {
			return nil, nil, err
		}
		return s, s.functions(), nil
	})
}

// Close stops the endpoints, waiting for calls in flight until ctx ends,
// then stops following the bucket. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error { return w.served.Close(ctx) }

// listPage is the page of models (sorted) that follows the cursor after
// and fits p; Truncated says more follow. It holds at least one model when
// any follows, so paging always moves on.
func listPage(models []Model, after string, p *answer.Pager) (ListResponse, error) {
	if after != "" {
		provider, id, err := parseListCursor(after)
		if err != nil {
			return ListResponse{}, err
		}
		models = models[sort.Search(len(models), func(i int) bool {
			m := models[i]
			return cmp.Or(cmp.Compare(m.Provider, provider), cmp.Compare(m.ID, id)) > 0
		}):]
	}
	page, truncated, err := answer.Page(models, p)
	return ListResponse{Models: page, Truncated: truncated}, err
}

// fitReconcile cuts the lists of resp to what fits p: Added first (the
// news), then Missing, then Known; each *Omitted counts the ids its list
// left out. The writes are done by then: an answer that did not fit
// would fail every retry the same way, since Missing repeats.
func fitReconcile(resp ReconcileResponse, p *answer.Pager) (ReconcileResponse, error) {
	for _, l := range []struct {
		ids     *[]string
		omitted *int
	}{
		{&resp.Added, &resp.AddedOmitted},
		{&resp.Missing, &resp.MissingOmitted},
		{&resp.Known, &resp.KnownOmitted},
	} {
		page, _, err := answer.Page(*l.ids, p)
		if err != nil {
			return ReconcileResponse{}, err
		}
		*l.omitted = len(*l.ids) - len(page)
		*l.ids = page
	}
	return resp, nil
}

func (s *Store) functions() []engine.Function {
	return []engine.Function{
		{
			ID:             ListFunction,
			Description:    "List catalog models, sorted by provider then id, optionally of one provider and with one capability (tools, vision, thinking, cache).",
			RequestSchema:  listRequestSchema,
			ResponseSchema: listResponseSchema,
			Idempotent:     true,
			Handler: func(_ context.Context, r *engine.Request) (any, error) {
				var req ListRequest
				if err := r.Bind(&req); err != nil {
					return nil, err
				}
				m, err := s.List(req.Provider, req.Capability)
				if err != nil {
					return nil, err
				}
				return listPage(m, req.After, answer.NewPager(r.Codec, s.e.Conn().MaxPayload()))
			},
		},
		{
			ID:             GetFunction,
			Description:    "Get one model by provider and id or alias (dated ids and their undated aliases both resolve); null when unknown.",
			RequestSchema:  getRequestSchema,
			ResponseSchema: getResponseSchema,
			Idempotent:     true,
			Handler: engine.Typed(func(_ context.Context, req GetRequest) (*Model, error) {
				return s.Get(req.Provider, req.ModelID)
			}),
		},
		{
			ID:             SupportsFunction,
			Description:    "Whether a model has a capability (tools, vision, thinking, cache); an unknown model supports nothing.",
			RequestSchema:  supportsRequestSchema,
			ResponseSchema: supportsResponseSchema,
			Idempotent:     true,
			Handler: engine.Typed(func(_ context.Context, req SupportsRequest) (SupportsResponse, error) {
				ok, err := s.Supports(req.Provider, req.ModelID, req.Capability)
				return SupportsResponse{Supported: ok}, err
			}),
		},
		{
			ID:             ReconcileFunction,
			Description:    "Compare the catalog with what provider::<provider>::models lists: store new models, mark vanished ones unavailable (a stored model missing for 30 days, by default, is deleted). Lists too long for one answer are cut (added, then missing, then known), *_omitted counting what was left out. Idempotent.",
			RequestSchema:  reconcileRequestSchema,
			ResponseSchema: reconcileResponseSchema,
			Idempotent:     true,
			Timeout:        s.timeout + reconcileSlack,
			Handler: func(ctx context.Context, r *engine.Request) (any, error) {
				var req ReconcileRequest
				if err := r.Bind(&req); err != nil {
					return nil, err
				}
				resp, err := s.Reconcile(ctx, req.Provider)
				if err != nil {
					return nil, err
				}
				return fitReconcile(resp, answer.NewPager(r.Codec, s.e.Conn().MaxPayload()))
			},
		},
	}
}

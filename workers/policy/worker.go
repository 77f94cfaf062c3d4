package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "policy"

// Function ids the worker serves.
const (
	CheckFunction  = "policy::check_permissions"
	StatusFunction = "policy::status"
	ReloadFunction = "policy::reload"
)

// CheckTimeout bounds one policy::check_permissions call; it is also the
// caller's budget in the spec (a caller that hears nothing in time denies).
const CheckTimeout = 5 * time.Second

// Settings of the module (workers.Env.Settings["policy"]).
const (
	// SettingFile is the policy file's path; a relative path is taken from
	// the node's home. Default: <home>/iii-permissions.yaml.
	SettingFile = "file"
	// SettingPollInterval is [WithPollInterval] as a Go duration ("500ms").
	SettingPollInterval = "poll_interval"
)

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "permission gate: policy::check_permissions against iii-permissions.yaml (hot reloaded), policy::status, policy::reload",
		New:         func() workers.Worker { return &Worker{} },
	})
}

var (
	_ workers.Worker      = (*Worker)(nil)
	_ workers.Provisioner = (*Worker)(nil)
	_ workers.Validator   = (*Worker)(nil)
	_ workers.Closer      = (*Worker)(nil)
)

// Worker serves a watched policy file on the bus as the functions
// policy::check_permissions, policy::status and policy::reload of the
// engine worker "policy".
type Worker struct {
	file       string
	configured bool // built by NewWorker: settings are not read
	opts       []Option

	mu     sync.Mutex
	w      *Watcher
	ew     *engine.Worker
	closed bool
}

// NewWorker returns a worker enforcing the policy file at file ("" for the
// fallback policy alone, nothing watched) with opts. The module registry
// builds a worker from its settings instead, at Provision.
func NewWorker(file string, opts ...Option) *Worker {
	return &Worker{file: file, configured: true, opts: opts}
}

// Provision reads the settings ([SettingFile], [SettingPollInterval]; an
// unknown setting is an error) unless the worker came from [NewWorker], and
// loads the policy file: a file that exists but does not parse stops the
// node, loudly, rather than start with a policy nobody wrote.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w != nil {
		return nil
	}
	if !w.configured {
		if err := w.readSettings(env); err != nil {
			return err
		}
	}
	logger := env.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts := append([]Option{WithLogger(logger.With("worker", WorkerName))}, w.opts...)
	wt, err := NewWatcher(w.file, opts...)
	if err != nil {
		return err
	}
	w.w = wt
	return nil
}

func (w *Worker) readSettings(env workers.Env) error {
	settings := env.Settings[WorkerName]
	keys := slices.Sorted(maps.Keys(settings))
	if env.Home != "" {
		w.file = filepath.Join(env.Home, DefaultFileName)
	}
	for _, k := range keys {
		v := settings[k]
		switch k {
		case SettingFile:
			if v == "" {
				return fmt.Errorf("%w: %s %s is empty", engine.ErrInvalidOption, WorkerName, k)
			}
			if !filepath.IsAbs(v) && env.Home != "" {
				v = filepath.Join(env.Home, v)
			}
			w.file = v
		case SettingPollInterval:
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%w: %s %s=%q is not a duration", engine.ErrInvalidOption, WorkerName, k, v)
			}
			w.opts = append(w.opts, WithPollInterval(d))
		default:
			return fmt.Errorf("%w: %s has no setting %q (want %s or %s)", engine.ErrInvalidOption, WorkerName, k, SettingFile, SettingPollInterval)
		}
	}
	// Surface a bad option now rather than at Start.
	_, err := buildOptions(w.opts)
	return err
}

// Validate checks that Provision left a policy in force.
func (w *Worker) Validate() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w == nil || w.w.Policy() == nil {
		return fmt.Errorf("%w: %s has no policy loaded", engine.ErrInvalidOption, WorkerName)
	}
	return nil
}

// Watcher is the worker's policy watcher, nil before Provision or Start.
func (w *Worker) Watcher() *Watcher {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w
}

// Start starts watching the file and registers the three functions on e.
// It returns [ErrStarted] when called twice and engine.ErrClosed after
// Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return engine.ErrClosed
	}
	if w.ew != nil {
		return ErrStarted
	}
	if w.w == nil {
		opts := append([]Option{WithLogger(e.Logger().With("worker", WorkerName))}, w.opts...)
		wt, err := NewWatcher(w.file, opts...)
		if err != nil {
			return err
		}
		w.w = wt
	}
	ew, err := e.Worker(WorkerName, engine.WithDescription("permission gate over iii-permissions.yaml"))
	if err != nil {
		return err
	}
	wt := w.w
	fns := []engine.Function{
		{
			ID:             CheckFunction,
			Description:    "Decide whether a function call may run: allow, deny or needs_approval, by the first matching rule of iii-permissions.yaml.",
			RequestSchema:  checkRequestSchema,
			ResponseSchema: checkResponseSchema,
			Idempotent:     true,
			Timeout:        CheckTimeout,
			Handler: engine.Typed(func(ctx context.Context, req CheckRequest) (Decision, error) {
				return wt.Check(ctx, req.FunctionID, req.Args), nil
			}),
		},
		{
			ID:             StatusFunction,
			Description:    "Describe the policy in force: file, source, loaded_at, rules, sha256 and the file's last error.",
			RequestSchema:  emptyRequestSchema,
			ResponseSchema: statusResponseSchema,
			Idempotent:     true,
			Handler: engine.Typed(func(context.Context, StatusRequest) (Status, error) {
				return wt.Status(), nil
			}),
		},
		{
			ID:             ReloadFunction,
			Description:    "Read the policy file now; a file that does not parse leaves the last good policy in force and is reported in last_error.",
			RequestSchema:  emptyRequestSchema,
			ResponseSchema: statusResponseSchema,
			Idempotent:     true,
			Handler: engine.Typed(func(context.Context, StatusRequest) (Status, error) {
				st, _ := wt.Reload() // the error is st.LastError
				return st, nil
			}),
		},
	}
	for _, fn := range fns {
		if err := ew.Register(fn); err != nil {
			_ = ew.Close(ctx)
			return err
		}
	}
	if err := wt.Start(); err != nil {
		_ = ew.Close(ctx)
		return err
	}
	w.ew = ew
	return nil
}

// Close stops the endpoints and the file watch, waiting until ctx ends.
// The policy stays readable through [Worker.Watcher]. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	ew, wt := w.ew, w.w
	w.mu.Unlock()
	var errs []error
	if ew != nil {
		errs = append(errs, ew.Close(ctx))
	}
	if wt != nil {
		errs = append(errs, wt.Close(ctx))
	}
	return errors.Join(errs...)
}

package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"

	"github.com/iii-on-nats/iii/engine"
)

// Worker is a running harness worker.
type Worker interface {
	// Start registers the worker's functions and triggers on e.
	Start(ctx context.Context, e *engine.Engine) error
}

// Provisioner is implemented by workers that read configuration before they
// start.
type Provisioner interface {
	Provision(ctx context.Context, env Env) error
}

// Validator is implemented by workers that check their configuration.
type Validator interface {
	Validate() error
}

// Closer is implemented by workers with resources to release.
type Closer interface {
	Close(ctx context.Context) error
}

// Env is what a node hands every worker at provisioning.
type Env struct {
	// Home is the node's data directory ($III_HOME).
	Home string
	// Logger is the node's logger; workers add their own attributes.
	Logger *slog.Logger
	// Settings holds per-worker settings by worker name (from flags or a
	// config file); a worker reads its own entry.
	Settings map[string]map[string]string
	// Engine, when set, gives each module the engine it runs on (`iii up`
	// gives each its own NATS connection, as if it ran in its own
	// process); nil runs every module on the engine given to
	// [Registry.Start]. The caller owns the engines it hands out and
	// closes them after the workers.
	Engine func(ctx context.Context, module string) (*engine.Engine, error)
}

// Module describes one registrable worker.
type Module struct {
	// Name is unique: letters, digits, '-' and '_'.
	Name string
	// Description is one line for `iii workers`.
	Description string
	// New returns a fresh, unprovisioned worker.
	New func() Worker
}

// Sentinel errors.
var (
	ErrInvalidModule   = errors.New("workers: invalid module")
	ErrDuplicateModule = errors.New("workers: module already registered")
	ErrUnknownModule   = errors.New("workers: unknown module")
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Registry is a set of modules by name.
type Registry struct {
	mu      sync.RWMutex
	modules map[string]Module
}

// NewRegistry returns an empty, isolated registry.
func NewRegistry() *Registry { return &Registry{modules: map[string]Module{}} }

// Register adds m.
func (r *Registry) Register(m Module) error {
	if !nameRE.MatchString(m.Name) || m.New == nil {
		return fmt.Errorf("%w: %q", ErrInvalidModule, m.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.modules[m.Name]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicateModule, m.Name)
	}
	r.modules[m.Name] = m
	return nil
}

// Modules lists the registered modules sorted by name.
func (r *Registry) Modules() []Module {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Module, 0, len(r.modules))
	for _, m := range r.modules {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Module returns the module named name.
func (r *Registry) Module(name string) (Module, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m, ok := r.modules[name]
	if !ok {
		return Module{}, fmt.Errorf("%w: %q", ErrUnknownModule, name)
	}
	return m, nil
}

var global = NewRegistry()

// Register adds m to the global registry; modules call it from init and a
// failure is a programming error, so it panics.
func Register(m Module) {
	if err := global.Register(m); err != nil {
		panic(err)
	}
}

// Modules lists the globally registered modules.
func Modules() []Module { return global.Modules() }

// Global is the registry [Register] fills.
func Global() *Registry { return global }

// Running is a set of started workers.
type Running struct {
	started []startedWorker
}

type startedWorker struct {
	name string
	w    Worker
}

// Start runs the lifecycle (New, Provision, Validate, Start) for each named
// module of r, in order, on e or on the engine env.Engine gives it. On
// error the workers already started are closed.
func (r *Registry) Start(ctx context.Context, e *engine.Engine, env Env, names ...string) (*Running, error) {
	run := &Running{}
	for _, name := range names {
		m, err := r.Module(name)
		if err != nil {
			_ = run.Close(ctx)
			return nil, err
		}
		we := e
		if env.Engine != nil {
			if we, err = env.Engine(ctx, name); err != nil {
				_ = run.Close(ctx)
				return nil, fmt.Errorf("workers: engine of %s: %w", name, err)
			}
		}
		w := m.New()
		if err := startOne(ctx, we, env, name, w); err != nil {
			_ = run.Close(ctx)
			return nil, err
		}
		run.started = append(run.started, startedWorker{name: name, w: w})
	}
	return run, nil
}

func startOne(ctx context.Context, e *engine.Engine, env Env, name string, w Worker) error {
	if env.Logger == nil {
		env.Logger = slog.New(slog.DiscardHandler)
	}
	if p, ok := w.(Provisioner); ok {
		if err := p.Provision(ctx, env); err != nil {
			return fmt.Errorf("workers: provision %s: %w", name, err)
		}
	}
	if v, ok := w.(Validator); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("workers: validate %s: %w", name, err)
		}
	}
	if err := w.Start(ctx, e); err != nil {
		if c, ok := w.(Closer); ok {
			_ = c.Close(ctx)
		}
		return fmt.Errorf("workers: start %s: %w", name, err)
	}
	return nil
}

// Names lists the started workers in start order.
func (run *Running) Names() []string {
	out := make([]string, len(run.started))
	for i, s := range run.started {
		out[i] = s.name
	}
	return out
}

// Close closes the started workers in reverse order.
func (run *Running) Close(ctx context.Context) error {
	var errs []error
	for i := len(run.started) - 1; i >= 0; i-- {
		if c, ok := run.started[i].w.(Closer); ok {
			if err := c.Close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("workers: close %s: %w", run.started[i].name, err))
			}
		}
	}
	run.started = nil
	return errors.Join(errs...)
}

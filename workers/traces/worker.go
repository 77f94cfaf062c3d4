package traces

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "traces"

// Settings of the module (workers.Env.Settings["traces"]).
const (
	// SettingMaxSpans is [WithMaxSpans] (an integer).
	SettingMaxSpans = "max_spans"
	// SettingMaxBytes is [WithMaxBytes] (an integer of bytes).
	SettingMaxBytes = "max_bytes"
	// SettingStreamMaxAge is [WithStreamMaxAge] (a Go duration: "24h").
	SettingStreamMaxAge = "stream_max_age"
	// SettingStreamMaxBytes is [WithStreamMaxBytes] (an integer of bytes).
	SettingStreamMaxBytes = "stream_max_bytes"
)

// functionTimeout bounds one call: a scan of the whole store.
const functionTimeout = 10 * time.Second

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "trace store: engine::traces::group_by, engine::traces::tree over the spans on III_SPANS",
		New:         func() workers.Worker { return NewWorker() },
	})
}

var (
	_ workers.Worker      = (*Worker)(nil)
	_ workers.Provisioner = (*Worker)(nil)
	_ workers.Closer      = (*Worker)(nil)
)

// Worker serves a [Store] that follows [StreamName] as the functions
// engine::traces::group_by and engine::traces::tree of the engine worker
// "traces".
type Worker struct {
	opts   []Option
	served workers.Served[*Store]
}

// NewWorker returns a worker whose store is opened with opts at Start.
func NewWorker(opts ...Option) *Worker { return &Worker{opts: opts} }

// Provision reads the module's settings ([SettingMaxSpans],
// [SettingMaxBytes], [SettingStreamMaxAge], [SettingStreamMaxBytes]); any other setting, or a
// value that does not parse, is an error wrapping engine.ErrInvalidOption.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	settings := env.Settings[WorkerName]
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		v := settings[k]
		var opt Option
		switch k {
		case SettingMaxSpans:
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%w: %s %s %q: %w", engine.ErrInvalidOption, WorkerName, k, v, err)
			}
			opt = WithMaxSpans(n)
		case SettingMaxBytes:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: %s %s %q: %w", engine.ErrInvalidOption, WorkerName, k, v, err)
			}
			opt = WithMaxBytes(n)
		case SettingStreamMaxAge:
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%w: %s %s %q: %w", engine.ErrInvalidOption, WorkerName, k, v, err)
			}
			opt = WithStreamMaxAge(d)
		case SettingStreamMaxBytes:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: %s %s %q: %w", engine.ErrInvalidOption, WorkerName, k, v, err)
			}
			opt = WithStreamMaxBytes(n)
		default:
			return fmt.Errorf("%w: %s has no setting %q (want %s, %s, %s or %s)", engine.ErrInvalidOption, WorkerName, k,
				SettingMaxSpans, SettingMaxBytes, SettingStreamMaxAge, SettingStreamMaxBytes)
		}
		w.opts = append(w.opts, opt)
	}
	_, err := buildOptions(w.opts)
	return err
}

// StreamLimits reads [SettingStreamMaxAge] and [SettingStreamMaxBytes]
// from the module's settings as [Worker.Provision] does, and refuses what
// it refuses; a limit not given is 0. A process that creates or updates
// [StreamName] itself (`iii up`'s span exporter) applies them with it.
func StreamLimits(settings map[string]string) (maxAge time.Duration, maxBytes int64, err error) {
	given := map[string]string{}
	for _, k := range []string{SettingStreamMaxAge, SettingStreamMaxBytes} {
		if v, ok := settings[k]; ok {
			given[k] = v
		}
	}
	w := NewWorker()
	if err := w.Provision(context.Background(), workers.Env{Settings: map[string]map[string]string{WorkerName: given}}); err != nil {
		return 0, 0, err
	}
	o, err := buildOptions(w.opts)
	if err != nil {
		return 0, 0, err
	}
	if _, ok := given[SettingStreamMaxAge]; ok {
		maxAge = o.maxAge
	}
	if _, ok := given[SettingStreamMaxBytes]; ok {
		maxBytes = o.maxBytes
	}
	return maxAge, maxBytes, nil
}

// Store is the worker's store, nil before Start.
func (w *Worker) Store() *Store {
	s, _ := w.served.Resource()
	return s
}

// Start opens the store (creating the stream when missing and replaying
// it) and registers the two functions on e. It returns [ErrStarted] when
// called twice and engine.ErrClosed after Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	return w.served.Start(ctx, e, WorkerName, "trace store: spans grouped by session, message or function, and span trees", func() (*Store, []engine.Function, error) {
		s, err := Open(ctx, e, w.opts...)
		if err != nil {
			return nil, nil, err
		}
		return s, s.functions(), nil
	})
}

// Close stops the endpoints, waiting for calls in flight until ctx ends,
// then stops following the stream. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error { return w.served.Close(ctx) }

func (s *Store) functions() []engine.Function {
	return []engine.Function{
		{
			ID:             GroupByFunction,
			Description:    "Group the stored spans by iii.session.id, iii.message.id or iii.function.id: per value its traces, span and error counts and time span, newest first.",
			RequestSchema:  groupByRequestSchema,
			ResponseSchema: groupByResponseSchema,
			Idempotent:     true,
			Timeout:        functionTimeout,
			Skill:          groupBySkill,
			Handler: engine.Typed(func(_ context.Context, req GroupByRequest) (GroupByResponse, error) {
				return s.GroupBy(req)
			}),
		},
		{
			ID:             TreeFunction,
			Description:    "The spans of one trace as a tree: every span under its parent, children by start time, links kept; not_found for a trace the store does not hold.",
			RequestSchema:  treeRequestSchema,
			ResponseSchema: treeResponseSchema,
			Idempotent:     true,
			Timeout:        functionTimeout,
			Skill:          treeSkill,
			Handler: engine.Typed(func(_ context.Context, req TreeRequest) (TreeResponse, error) {
				return s.Tree(req.TraceID)
			}),
		},
	}
}

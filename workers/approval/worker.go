package approval

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "approval"

// Function ids the worker serves.
const (
	ResolveFunction     = "approval::resolve"
	ListPendingFunction = "approval::list_pending"
	SettingsGetFunction = "approval::settings::get"
	SettingsSetFunction = "approval::settings::set"
)

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "approval gate: approval::resolve, approval::list_pending, approval::settings::get and ::set over the approvals KV buckets",
		New:         func() workers.Worker { return &Worker{} },
	})
}

var (
	_ workers.Worker      = (*Worker)(nil)
	_ workers.Provisioner = (*Worker)(nil)
	_ workers.Closer      = (*Worker)(nil)
)

// Worker serves a [Store] on the bus as the four approval functions of the
// engine worker "approval".
type Worker struct {
	opts []Option

	eps workers.Endpoints

	mu    sync.Mutex
	store *Store
	sweep *sweeper
}

// NewWorker returns a worker whose store is opened with opts at Start. The
// module registry builds one with no options.
func NewWorker(opts ...Option) *Worker { return &Worker{opts: opts} }

// SettingDecisionTTL is the module's one setting
// (workers.Env.Settings["approval"]): a Go duration, [WithDecisionTTL].
const SettingDecisionTTL = "decision_ttl"

// Provision reads the settings ([SettingDecisionTTL]); anything else, or a
// value that does not parse or is out of range, is an error wrapping
// engine.ErrInvalidOption.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	settings := env.Settings[WorkerName]
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		if k != SettingDecisionTTL {
			return fmt.Errorf("%w: %s has no setting %q", engine.ErrInvalidOption, WorkerName, k)
		}
		d, err := time.ParseDuration(settings[k])
		if err != nil {
			return fmt.Errorf("%w: %s.%s %q: %v", engine.ErrInvalidOption, WorkerName, k, settings[k], err)
		}
		w.opts = append(w.opts, WithDecisionTTL(d))
	}
	_, err := buildOptions(w.opts)
	return err
}

// Store is the worker's store, nil before Start.
func (w *Worker) Store() *Store {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.store
}

// Start opens the buckets (creating them when missing), starts the sweep
// that finishes the decisions whose resolver stopped between its two
// writes ([WithSettleDelay]; over the decisions copies Start opened), and
// registers the four functions on e. It returns [ErrStarted] when called
// twice and engine.ErrClosed after Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	var sweep *sweeper
	err := w.eps.Start(ctx, e, WorkerName, "approval gate: decisions on parked function calls and per-session approval settings", func() ([]engine.Function, error) {
		s, err := Open(ctx, e, w.opts...)
		if err != nil {
			return nil, err
		}
		regions := []string{""}
		if r := e.Region(); r != "" {
			regions = append(regions, r)
		}
		if sweep, err = s.startSweep(ctx, regions); err != nil {
			return nil, err
		}
		w.mu.Lock()
		w.store, w.sweep = s, sweep
		w.mu.Unlock()
		return s.functions(), nil
	})
	if err != nil && sweep != nil {
		sweep.Stop() // the functions did not register
	}
	return err
}

// Close stops the sweep and the endpoints, waiting for calls in flight
// until ctx ends. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error {
	return w.eps.Close(ctx, func() {
		w.mu.Lock()
		sweep := w.sweep
		w.mu.Unlock()
		if sweep != nil {
			sweep.Stop()
		}
	})
}

func (s *Store) functions() []engine.Function {
	return []engine.Function{
		{
			ID:             ResolveFunction,
			Description:    "Decide a parked function call: allow, deny, or aborted (abort the run). Decided once: the same decision asked again answers ok with already_decided; another decision, or a call that is not waiting (or whose args_hash changed), is not_pending. Human-only.",
			RequestSchema:  resolveRequestSchema,
			ResponseSchema: resolveResponseSchema,
			Handler:        engine.Typed(s.Resolve),
		},
		{
			ID:             ListPendingFunction,
			Description:    "List the function calls waiting for a human decision, oldest first, of one session or of all.",
			RequestSchema:  listPendingRequestSchema,
			ResponseSchema: listPendingResponseSchema,
			Idempotent:     true,
			Handler: engine.Typed(func(ctx context.Context, req ListPendingRequest) (ListPendingResponse, error) {
				p, err := s.ListPending(ctx, req.SessionID)
				if err != nil {
					return ListPendingResponse{}, err
				}
				resp, tooLarge, err := fitPending(p, s.maxPayload()-answerRoom)
				for _, c := range tooLarge {
					s.logger.Warn("pending call too large to list, counted in omitted; decide it by its id (its approval_requested event, turn::get_state)",
						"session_id", c.SessionID, "function_call_id", c.FunctionCallID, "function_id", c.FunctionID)
				}
				return resp, err
			}),
		},
		{
			ID:             SettingsGetFunction,
			Description:    "Read a session's approval settings: mode (manual, auto, full) and always_allow patterns; manual and [] when never set.",
			RequestSchema:  settingsGetRequestSchema,
			ResponseSchema: settingsResponseSchema,
			Idempotent:     true,
			Handler: engine.Typed(func(ctx context.Context, req SettingsGetRequest) (agent.ApprovalSettings, error) {
				return s.Settings(ctx, req.SessionID)
			}),
		},
		{
			ID:             SettingsSetFunction,
			Description:    "Change a session's approval settings; omitted fields keep their value. Human-only: a model can never call it.",
			RequestSchema:  settingsSetRequestSchema,
			ResponseSchema: settingsResponseSchema,
			Handler: engine.Typed(func(ctx context.Context, req SettingsSetRequest) (agent.ApprovalSettings, error) {
				return s.SetSettings(ctx, req)
			}),
		},
	}
}

// answerRoom is what an answer leaves of the server's max payload for its
// headers and the envelope around the list.
const answerRoom = 1024

// fitPending is the answer listing the oldest of pending that fit in limit
// bytes in either codec (the caller's is not known here), and counting the
// others in Omitted. Without it, more pending calls than one message holds
// would make the answer fail as a whole, and no call could be listed. A
// call too large to be listed even alone is passed over (and returned in
// tooLarge): stopping at it would list nothing, this call or any newer,
// however many calls fit.
func fitPending(pending []Pending, limit int64) (resp ListPendingResponse, tooLarge []Pending, err error) {
	listed := make([]Pending, 0, len(pending))
	var size int64
	for i, p := range pending {
		j, err := wire.JSON.Marshal(p)
		if err != nil {
			return ListPendingResponse{}, nil, wire.Wrap(wire.CodeInternal, err, "encode pending call")
		}
		m, err := wire.Msgpack.Marshal(p)
		if err != nil {
			return ListPendingResponse{}, nil, wire.Wrap(wire.CodeInternal, err, "encode pending call")
		}
		n := int64(max(len(j), len(m))) + 1 // and a comma
		if n > limit {
			tooLarge = append(tooLarge, p)
			continue
		}
		if size+n > limit {
			return ListPendingResponse{Pending: listed, Omitted: len(tooLarge) + len(pending) - i}, tooLarge, nil
		}
		size += n
		listed = append(listed, p)
	}
	return ListPendingResponse{Pending: listed, Omitted: len(tooLarge)}, tooLarge, nil
}

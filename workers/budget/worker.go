package budget

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/internal/answer"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "budget"

// Function ids the worker serves.
const (
	CreateFunction  = "budget::create"
	DeleteFunction  = "budget::delete"
	ListFunction    = "budget::list"
	CheckFunction   = "budget::check"
	ReserveFunction = "budget::reserve"
	SettleFunction  = "budget::settle"
	UsageFunction   = "budget::usage"
)

// Settings of the module (workers.Env.Settings["budget"]), Go durations.
const (
	// SettingReservationTTL sets [WithReservationTTL] ("15m").
	SettingReservationTTL = "reservation_ttl"
	// SettingRetention sets [WithRetention] ("1h").
	SettingRetention = "retention"
)

// callTimeout bounds one reserve or settle: well under pendingLease, so a
// reserve in flight never looks abandoned.
const callTimeout = 10 * time.Second

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "spend ceilings per workspace and agent: budget::create, delete, list, check, reserve, settle, usage over a shared JetStream KV ledger",
		New:         func() workers.Worker { return &Worker{} },
	})
}

var (
	_ workers.Worker      = (*Worker)(nil)
	_ workers.Provisioner = (*Worker)(nil)
	_ workers.Closer      = (*Worker)(nil)
)

// Worker serves a [Ledger] on the bus as the budget functions of the
// engine worker "budget".
type Worker struct {
	opts []Option

	served workers.Served[*Ledger]
}

// NewWorker returns a worker whose ledger is opened with opts at Start.
// The module registry builds one with no options.
func NewWorker(opts ...Option) *Worker { return &Worker{opts: opts} }

// Provision reads the settings [SettingReservationTTL] and
// [SettingRetention]; anything else is an error.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	settings := env.Settings[WorkerName]
	keys := slices.Sorted(maps.Keys(settings))
	for _, k := range keys {
		v := settings[k]
		var with func(time.Duration) Option
		switch k {
		case SettingReservationTTL:
			with = WithReservationTTL
		case SettingRetention:
			with = WithRetention
		default:
			return fmt.Errorf("%w: %s has no setting %q (want %s or %s)", engine.ErrInvalidOption, WorkerName, k, SettingReservationTTL, SettingRetention)
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%w: %s %s=%q is not a duration", engine.ErrInvalidOption, WorkerName, k, v)
		}
		opt := with(d)
		if _, err := buildOptions([]Option{opt}); err != nil {
			return err
		}
		w.opts = append(w.opts, opt)
	}
	return nil
}

// Ledger is the worker's ledger, nil before Start.
func (w *Worker) Ledger() *Ledger {
	l, _ := w.served.Resource()
	return l
}

// Start opens the ledger and registers the budget functions on e. It
// returns [ErrStarted] when called twice and engine.ErrClosed after Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	return w.served.Start(ctx, e, WorkerName, "budgets: spend ceilings in USD per period, reserved before and settled after every model call", func() (*Ledger, []engine.Function, error) {
		l, err := Open(ctx, e, w.opts...)
		if err != nil {
			return nil, nil, err
		}
		return l, l.functions(), nil
	})
}

// Close stops the endpoints (waiting for calls in flight until ctx ends),
// then the ledger. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error { return w.served.Close(ctx) }

func (l *Ledger) functions() []engine.Function {
	return []engine.Function{
		{
			ID:             CreateFunction,
			Description:    "Create a budget: a ceiling in USD per day, ISO week or month (UTC) for a workspace, an agent, or both, with alert thresholds. Human-only.",
			RequestSchema:  createRequestSchema,
			ResponseSchema: budgetSchema,
			Handler: engine.Typed(func(ctx context.Context, req CreateRequest) (Budget, error) {
				return l.Create(ctx, req)
			}),
		},
		{
			ID:             DeleteFunction,
			Description:    "Delete a budget and its spend records; deleted is false when it did not exist. Human-only.",
			RequestSchema:  deleteRequestSchema,
			ResponseSchema: deleteResponseSchema,
			Idempotent:     true,
			Handler: engine.Typed(func(ctx context.Context, req DeleteRequest) (DeleteResponse, error) {
				ok, err := l.Delete(ctx, req.BudgetID)
				return DeleteResponse{Deleted: ok}, err
			}),
		},
		{
			ID:             ListFunction,
			Description:    "List every budget, by id (a list past the max payload comes in pages: ask again with after).",
			RequestSchema:  listRequestSchema,
			ResponseSchema: listResponseSchema,
			Idempotent:     true,
			Handler: func(ctx context.Context, r *engine.Request) (any, error) {
				var req ListRequest
				if err := r.Bind(&req); err != nil {
					return nil, err
				}
				b, err := l.List(ctx)
				if err != nil {
					return nil, err
				}
				return listPage(b, req, answer.NewPager(r.Codec, l.js.Conn().MaxPayload()))
			},
		},
		{
			ID:             CheckFunction,
			Description:    "Would the budgets of a workspace and agent (or one budget) admit an estimated cost now? Holds nothing.",
			RequestSchema:  checkRequestSchema,
			ResponseSchema: checkResponseSchema,
			Idempotent:     true,
			Handler: engine.Typed(func(ctx context.Context, req CheckRequest) (CheckResponse, error) {
				return l.Check(ctx, req)
			}),
		},
		{
			ID:             ReserveFunction,
			Description:    "Hold an estimated cost in every matching budget before a model call, all or nothing, or answer budget_exceeded. Idempotent by reservation_id; the hold lapses after ttl_ms. Human-only.",
			RequestSchema:  reserveRequestSchema,
			ResponseSchema: reserveResponseSchema,
			Idempotent:     true,
			Timeout:        callTimeout,
			Handler: engine.Typed(func(ctx context.Context, req ReserveRequest) (ReserveResponse, error) {
				return l.Reserve(ctx, req)
			}),
		},
		{
			ID:             SettleFunction,
			Description:    "Count a reservation's actual cost as spent in each of its budgets and drop its holds. Idempotent: settling twice counts once. Human-only.",
			RequestSchema:  settleRequestSchema,
			ResponseSchema: statusesSchema,
			Idempotent:     true,
			Timeout:        callTimeout,
			Handler: engine.Typed(func(ctx context.Context, req SettleRequest) (SettleResponse, error) {
				return l.Settle(ctx, req)
			}),
		},
		{
			ID:             UsageFunction,
			Description:    "Spent, reserved and remaining USD this period of one budget, of the budgets of a workspace and agent, or of all (past the max payload it pages: ask again with after).",
			RequestSchema:  usageRequestSchema,
			ResponseSchema: usageResponseSchema,
			Idempotent:     true,
			Handler: func(ctx context.Context, r *engine.Request) (any, error) {
				var req UsageRequest
				if err := r.Bind(&req); err != nil {
					return nil, err
				}
				return l.usage(ctx, req, answer.NewPager(r.Codec, l.js.Conn().MaxPayload()))
			},
		},
	}
}

package compaction

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// Settings of the module (workers.Env.Settings["compaction"]).
const (
	SettingReserveTokens = "reserve_tokens" // integer, [WithReserveTokens]
	SettingKeepFraction  = "keep_fraction"  // number in (0, 1), [WithKeepFraction]
	SettingPruneBytes    = "prune_bytes"    // integer, [WithPruneBytes]
	SettingLeaseTTL      = "lease_ttl"      // Go duration, [WithLeaseTTL]
	SettingAuto          = "auto"           // bool, [WithAuto]
	SettingConcurrency   = "concurrency"    // integer, [WithConcurrency]
	SettingTimeout       = "timeout"        // Go duration, [WithTimeout]
	SettingSplitTurns    = "split_turns"    // bool, [WithSplitTurns]
	SettingMaxEntrySize  = "max_entry_size" // integer, [WithMaxEntrySize]
)

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "context compaction: compaction::compact summarizes a session's old history; a turn_end over the window triggers it",
		New:         func() workers.Worker { return NewWorker() },
	})
}

var (
	_ workers.Worker      = (*Worker)(nil)
	_ workers.Provisioner = (*Worker)(nil)
	_ workers.Closer      = (*Worker)(nil)
)

// Worker serves compaction::compact on the engine worker "compaction" and
// runs the threshold trigger.
type Worker struct {
	opts []Option
	eps  workers.Endpoints

	mu     sync.Mutex
	c      *compactor
	trig   *trigger
	done   *workers.Shutdown
	closed bool
}

// NewWorker returns a worker configured with opts at Start. The module
// registry builds one with no options.
func NewWorker(opts ...Option) *Worker { return &Worker{opts: opts} }

// Provision reads the settings (the Setting* constants); anything else,
// or a value that does not parse or is out of range, is an error wrapping
// engine.ErrInvalidOption.
//
// With no max_entry_size of its own, the worker takes the session tree's
// ("session.max_entry_size", the module it writes to) when that is set
// and within this worker's range: an operator who changes the tree's
// limit changes what a compaction entry must fit without saying it twice.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	settings := env.Settings[WorkerName]
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		opt, err := settingOption(k, settings[k])
		if err != nil {
			return err
		}
		w.opts = append(w.opts, opt)
	}
	if _, own := settings[SettingMaxEntrySize]; !own {
		if n, err := strconv.Atoi(env.Settings[sessionModule][SettingMaxEntrySize]); err == nil && n >= MinMaxEntrySize && n <= MaxMaxEntrySize {
			w.opts = append(w.opts, WithMaxEntrySize(n))
		}
	}
	_, err := buildOptions(w.opts)
	return err
}

// sessionModule is the session tree's module name, whose max_entry_size
// the worker follows (it imports no other worker).
const sessionModule = "session"

func settingOption(k, v string) (Option, error) {
	bad := func(err error) error {
		return fmt.Errorf("%w: %s.%s %q: %v", engine.ErrInvalidOption, WorkerName, k, v, err)
	}
	switch k {
	case SettingReserveTokens, SettingPruneBytes, SettingConcurrency, SettingMaxEntrySize:
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, bad(err)
		}
		switch k {
		case SettingReserveTokens:
			return WithReserveTokens(n), nil
		case SettingPruneBytes:
			return WithPruneBytes(n), nil
		case SettingMaxEntrySize:
			return WithMaxEntrySize(n), nil
		default:
			return WithConcurrency(n), nil
		}
	case SettingKeepFraction:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, bad(err)
		}
		return WithKeepFraction(f), nil
	case SettingLeaseTTL, SettingTimeout:
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, bad(err)
		}
		if k == SettingLeaseTTL {
			return WithLeaseTTL(d), nil
		}
		return WithTimeout(d), nil
	case SettingAuto, SettingSplitTurns:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, bad(err)
		}
		if k == SettingAuto {
			return WithAuto(b), nil
		}
		return WithSplitTurns(b), nil
	}
	return nil, fmt.Errorf("%w: %s has no setting %q", engine.ErrInvalidOption, WorkerName, k)
}

// Start opens the lease bucket (creating it when missing), registers
// compaction::compact on e and, unless auto is off, starts the threshold
// trigger (which binds its consumer as soon as the events stream exists).
// It returns [ErrStarted] when called twice and engine.ErrClosed after
// Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	var (
		o   options
		log *slog.Logger
	)
	err := w.eps.Start(ctx, e, WorkerName, "context compaction of session histories", func() ([]engine.Function, error) {
		var err error
		if o, err = buildOptions(w.opts); err != nil {
			return nil, err
		}
		log = o.logger
		if log == nil {
			log = e.Logger().With("worker", WorkerName)
		}
		kv, err := e.EnsureKV(ctx, LeaseBucketConfig(e.Replicas()))
		if err != nil {
			return nil, err
		}
		st, err := kv.Status(ctx)
		if err != nil {
			return nil, wire.Wrap(wire.CodeUnavailable, err, "kv bucket %s", LeaseBucket)
		}
		if st.LimitMarkerTTL() <= 0 {
			return nil, fmt.Errorf("%w: %s (recreate it, or set its limit marker TTL)", ErrBucketConfig, LeaseBucket)
		}
		c := &compactor{e: e, o: o, log: log, leases: &leases{
			kv: kv, js: e.JetStream(), subject: "$KV." + LeaseBucket + ".",
			ttl: o.leaseTTL, poll: o.poll, log: log,
		}}
		done := workers.NewShutdown(errShuttingDown)
		w.mu.Lock()
		w.c, w.done = c, done
		w.mu.Unlock()
		return []engine.Function{{
			ID:             CompactFunction,
			Description:    "Summarize the oldest part of a session's active path with its own model and append a compaction entry, so the conversation fits the context window; one compaction per session at a time.",
			RequestSchema:  compactRequestSchema,
			ResponseSchema: compactResponseSchema,
			Timeout:        o.timeout,
			Skill:          compactSkill,
			Handler: engine.Typed(func(ctx context.Context, req CompactRequest) (CompactResponse, error) {
				ctx, release := done.Bind(ctx)
				defer release()
				return c.compact(ctx, req, 0)
			}),
		}}, nil
	})
	if err != nil || !o.auto {
		return err
	}
	// The trigger starts once the function serves, unless Close came
	// first.
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.trig = startTrigger(e, w.c, w.done, o, log)
	}
	return nil
}

// Compact runs one compaction in this process, as compaction::compact
// does; it answers unavailable before Start and after Close.
func (w *Worker) Compact(ctx context.Context, req CompactRequest) (CompactResponse, error) {
	w.mu.Lock()
	c, done, closed := w.c, w.done, w.closed
	w.mu.Unlock()
	if c == nil || closed {
		return CompactResponse{}, wire.Errorf(wire.CodeUnavailable, "the compaction worker is not running")
	}
	ctx, release := done.Bind(ctx)
	defer release()
	return c.compact(ctx, req, 0)
}

// Close stops the threshold trigger, ends the compactions in flight
// (their leases are released; nothing half-written stays) and stops the
// endpoint, waiting for the handlers until ctx ends. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error {
	var terr error
	err := w.eps.Close(ctx, func() {
		w.mu.Lock()
		w.closed = true
		trig, done := w.trig, w.done
		w.mu.Unlock()
		if done != nil {
			done.Close()
		}
		if trig != nil {
			terr = trig.close(ctx)
		}
	})
	if err == nil {
		err = terr
	}
	return err
}

package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/hook"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "hooks"

// PublishCollectFunction is the function id the worker serves.
const PublishCollectFunction = "hooks::publish_collect"

// functionTimeout bounds one call: the longest collect plus room to answer.
// A caller's shorter budget (Iii-Timeout-Ms) wins.
const functionTimeout = hook.MaxTimeout + 5*time.Second

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "hook fan-out: hooks::publish_collect publishes a hook to every subscriber and merges their replies",
		New:         func() workers.Worker { return NewWorker() },
	})
}

var (
	_ workers.Worker = (*Worker)(nil)
	_ workers.Closer = (*Worker)(nil)
)

// Worker serves hooks::publish_collect on the engine worker "hooks". It
// has no settings and no state: every call is one [hook.PublishCollect] on
// the engine's connection.
type Worker struct {
	eps workers.Endpoints
}

// NewWorker returns an unstarted worker.
func NewWorker() *Worker { return &Worker{} }

// Provision refuses any setting: the worker has none (a mistyped
// --set hooks.X would otherwise be ignored silently).
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	settings := env.Settings[WorkerName]
	if len(settings) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(settings))
	return fmt.Errorf("%w: %s has no settings (got %q)", engine.ErrInvalidOption, WorkerName, keys)
}

// Start registers hooks::publish_collect on e. It returns [ErrStarted] when
// called twice and engine.ErrClosed after Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	return w.eps.Start(ctx, e, WorkerName, "hook fan-out and reply merging", func() ([]engine.Function, error) {
		return []engine.Function{{
			ID:             PublishCollectFunction,
			Description:    "Publish a hook payload to every subscriber of iii.hook.<topic> and merge their replies (first_block_wins, field_merge or pipeline_last_wins); returns at once when nobody subscribes.",
			RequestSchema:  publishCollectRequestSchema,
			ResponseSchema: publishCollectResponseSchema,
			Timeout:        functionTimeout,
			Handler:        publishCollect(e),
		}}, nil
	})
}

// publishCollect is the handler. A publish failure is an answer, not a
// wire error: the spec's output carries publish_failed, and the caller
// denies on it.
func publishCollect(e *engine.Engine) engine.Handler {
	nc := e.Conn()
	logger := e.Logger().With("worker", WorkerName)
	inject := hook.WithInjector(e.Inject)
	return func(ctx context.Context, r *engine.Request) (any, error) {
		req, err := bind(r)
		if err != nil {
			return nil, err
		}
		ctx, cancel := engine.WithReplyMargin(ctx)
		defer cancel()
		res, err := hook.PublishCollect(ctx, nc, req, inject)
		if errors.Is(err, hook.ErrPublishFailed) {
			logger.Warn("hook publish failed", slog.String("topic", req.Topic), slog.Any("error", err))
			err = nil
		}
		if err != nil {
			return nil, err
		}
		return fit(res, req.Topic, r.Codec, nc.MaxPayload()-answerRoom)
	}
}

// answerRoom is what an answer leaves of the server's max payload for its
// headers.
const answerRoom = 1024

// fit is res encoded in codec within limit bytes: whole when it fits,
// else with the newest replies left out of Replies and counted in
// Omitted (Merged still folds them: it is what a caller acts on). Without
// it one reply over half the max payload (it is in Replies and in Merged)
// made the whole answer fail. A Merged that does not fit alone is an
// internal error.
func fit(res hook.Result, topic string, codec wire.Codec, limit int64) (engine.Raw, error) {
	body, err := codec.Marshal(res)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode the answer")
	}
	if int64(len(body)) <= limit {
		return body, nil
	}
	all := res.Replies
	res.Replies = []map[string]any{}
	res.Omitted = len(all)
	base, err := codec.Marshal(res)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode the answer")
	}
	size := int64(len(base)) + 16 // slack: a longer array header (msgpack)
	if size > limit {
		return nil, wire.Errorf(wire.CodeInternal, "the merged reply of hook %q does not fit the server's max payload of %d bytes", topic, limit+answerRoom)
	}
	n := 0
	for _, rep := range all {
		b, err := codec.Marshal(rep)
		if err != nil {
			return nil, wire.Wrap(wire.CodeInternal, err, "encode a reply")
		}
		if size += int64(len(b)) + 1; size > limit { // and a comma
			break
		}
		n++
	}
	res.Replies, res.Omitted = all[:n], len(all)-n
	if body, err = codec.Marshal(res); err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode the answer")
	}
	return body, nil
}

// jsonRequest is the request of a JSON caller, its payload kept as the
// JSON text it came as. Decoded into any, every number would become a
// float64, and an integer past 2^53 (an int64 id) would reach the
// subscribers changed.
type jsonRequest struct {
	hook.Request
	Payload json.RawMessage `json:"payload"`
}

// bind decodes and validates the request; every error is invalid_payload.
// A JSON caller's payload is published as the JSON it sent; a msgpack
// caller's decodes without loss (integers stay integers).
func bind(r *engine.Request) (hook.Request, error) {
	if r.Codec.ContentType() != wire.ContentJSON {
		var req hook.Request
		err := r.Bind(&req)
		return req, err
	}
	var j jsonRequest
	if err := r.Bind(&j); err != nil {
		return hook.Request{}, err
	}
	req := j.Request
	if j.Payload != nil {
		req.Payload = j.Payload
	}
	return req, nil
}

// Close stops the endpoint, waiting until ctx ends for calls in flight.
// Close is idempotent.
func (w *Worker) Close(ctx context.Context) error { return w.eps.Close(ctx, nil) }

package scripted

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "provider-scripted"

// FunctionTimeout bounds one call of either function (the caller's shorter
// budget wins); it leaves room for [MaxSleep].
const FunctionTimeout = 5 * time.Minute

// Settings of the module (workers.Env.Settings["provider-scripted"]).
const (
	// SettingDeltaSize is [WithDeltaSize] in bytes ("8").
	SettingDeltaSize = "delta_size"
	// SettingDeltaInterval is [WithDeltaInterval] as a Go duration ("20ms").
	SettingDeltaInterval = "delta_interval"
)

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "deterministic offline model provider: provider::scripted::stream and ::complete, model \"echo\"",
		New:         func() workers.Worker { return NewWorker(nil) },
	})
}

var (
	_ workers.Worker      = (*Worker)(nil)
	_ workers.Provisioner = (*Worker)(nil)
	_ workers.Closer      = (*Worker)(nil)
)

// errShuttingDown cancels the calls in flight when the worker closes; a
// stream ends with it as its error frame.
var errShuttingDown = wire.Errorf(wire.CodeUnavailable, "%s is shutting down", WorkerName)

// Worker serves a [Provider] on the bus as the functions
// provider::scripted::stream and provider::scripted::complete of the engine
// worker "provider-scripted".
type Worker struct {
	p    *Provider
	kept *agent.Transcripts

	eps workers.Endpoints

	mu   sync.Mutex
	done *workers.Shutdown // closed by Close: calls in flight stop
}

// NewWorker returns a worker serving p. With a nil p the worker builds a
// provider from its settings at Provision (or with the defaults at Start):
// that is what the module registry does.
func NewWorker(p *Provider) *Worker {
	return &Worker{p: p, kept: agent.NewTranscripts(0, 0)}
}

// Provision builds the provider from the worker's settings
// ([SettingDeltaSize], [SettingDeltaInterval]); an unknown setting is an
// error. A worker given a provider by [NewWorker] keeps it.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	if w.p != nil {
		return nil
	}
	settings := env.Settings[WorkerName]
	keys := slices.Sorted(maps.Keys(settings))
	var opts []Option
	for _, k := range keys {
		v := settings[k]
		switch k {
		case SettingDeltaSize:
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%w: %s %s=%q is not an integer", engine.ErrInvalidOption, WorkerName, k, v)
			}
			opts = append(opts, WithDeltaSize(n))
		case SettingDeltaInterval:
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%w: %s %s=%q is not a duration", engine.ErrInvalidOption, WorkerName, k, v)
			}
			opts = append(opts, WithDeltaInterval(d))
		default:
			return fmt.Errorf("%w: %s has no setting %q (want %s or %s)", engine.ErrInvalidOption, WorkerName, k, SettingDeltaSize, SettingDeltaInterval)
		}
	}
	p, err := New(opts...)
	if err != nil {
		return err
	}
	w.p = p
	return nil
}

// Start registers both functions on e. It returns [ErrStarted] when called
// twice and engine.ErrClosed after Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	return w.eps.Start(ctx, e, WorkerName, "deterministic offline model provider", func() ([]engine.Function, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.p == nil {
			p, err := New()
			if err != nil {
				return nil, err
			}
			w.p = p
		}
		done := workers.NewShutdown(errShuttingDown)
		w.done = done
		models := modelsOf(w.p)
		fns := []engine.Function{
			{
				ID:             StreamFunction,
				Description:    "Stream the scripted model's answer to messages into a channel as model events; replies {stop_reason} once the stream has ended.",
				RequestSchema:  streamRequestSchema,
				ResponseSchema: streamResponseSchema,
				Timeout:        FunctionTimeout,
				Handler:        w.streamHandler(e, done),
			},
			{
				ID:             CompleteFunction,
				Description:    "Answer messages with the scripted model's final assistant message.",
				RequestSchema:  completeRequestSchema,
				ResponseSchema: completeResponseSchema,
				Idempotent:     true,
				Timeout:        FunctionTimeout,
				Handler:        w.completeHandler(done),
			},
			{
				ID:             ModelsFunction,
				Description:    "The scripted provider's models (what models::reconcile asks).",
				RequestSchema:  `{"type":"object"}`,
				ResponseSchema: `{"type":"object","required":["models"],"properties":{"models":{"type":"array","items":{"type":"object","required":["id"],"properties":{"id":{"type":"string"},"display_name":{"type":"string"}}}}}}`,
				Idempotent:     true,
				Handler: engine.Typed(func(context.Context, struct{}) (ModelsResponse, error) {
					return models, nil
				}),
			},
		}
		return fns, nil
	})
}

// Close stops the calls in flight (a stream ends with an unavailable error
// frame) and the worker's endpoints, waiting for the handlers until ctx
// ends. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error {
	return w.eps.Close(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done.Close()
	})
}

// streamHandler decodes a stream request and writes its frames in the
// request's codec.
func (w *Worker) streamHandler(e *engine.Engine, done *workers.Shutdown) engine.Handler {
	return func(ctx context.Context, r *engine.Request) (any, error) {
		// Bound without validation: a continuation has no messages until
		// it is resolved; the provider validates the whole request.
		var raw unvalidatedStream
		if err := r.Bind(&raw); err != nil {
			return nil, err
		}
		req := StreamRequest(raw)
		msgs, err := w.kept.Resolve(req.Transcript, req.Messages)
		if err != nil {
			return nil, workers.TranscriptError(err)
		}
		// Validate what is new: the messages of a continuation's base
		// were validated when they came (validating the whole transcript
		// per call was a tenth of a long session's CPU).
		check := req
		check.Messages = msgs
		if ref := req.Transcript; ref != nil && ref.Base > 0 && len(msgs) > ref.Base {
			check.Messages = msgs[ref.Base:]
		}
		if err := check.Validate(); err != nil {
			return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
		}
		req.Messages = msgs
		ctx, release := done.Bind(ctx)
		defer release()
		resp, err := w.p.stream(ctx, e, req, channel.WithCodec(r.Codec))
		if err == nil {
			resp.TranscriptKept = w.kept.Keep(req.Transcript, req.Messages)
		}
		return resp, err
	}
}

func (w *Worker) completeHandler(done *workers.Shutdown) engine.Handler {
	return engine.Typed(func(ctx context.Context, req CompleteRequest) (CompleteResponse, error) {
		ctx, release := done.Bind(ctx)
		defer release()
		return w.p.Complete(ctx, req)
	})
}

// modelsOf lists every model p serves, the models of [WithScript] with
// echo: a reconcile that saw echo alone marked a scripted model missing.
func modelsOf(p *Provider) ModelsResponse {
	var r ModelsResponse
	for _, m := range p.Models() {
		info := ModelInfo{ID: m}
		if m == EchoModel {
			info.DisplayName = "Scripted echo (offline)"
		}
		r.Models = append(r.Models, info)
	}
	return r
}

// ModelsResponse is provider::scripted::models' answer.
type ModelsResponse struct {
	Models []ModelInfo `json:"models"`
}

// ModelInfo names one model a provider serves.
type ModelInfo struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name,omitempty"`
}

// unvalidatedStream is a StreamRequest without its Validate method.
type unvalidatedStream StreamRequest

package anthropic

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "provider-anthropic"

// FunctionTimeout bounds one stream or complete call (the caller's shorter
// budget wins): a long answer streams for minutes.
const FunctionTimeout = 15 * time.Minute

// ModelsTimeout bounds one models call.
const ModelsTimeout = time.Minute

// Settings of the module (workers.Env.Settings["provider-anthropic"]).
const (
	// SettingBaseURL is [WithBaseURL].
	SettingBaseURL = "base_url"
	// SettingMaxRetries is [WithMaxRetries] ("2").
	SettingMaxRetries = "max_retries"
	// SettingBackoff is [WithBackoff] as a Go duration ("500ms").
	SettingBackoff = "backoff"
	// SettingMaxRetryWait is [WithMaxRetryWait] as a Go duration ("20s").
	SettingMaxRetryWait = "max_retry_wait"
	// SettingCredentialTTL is [WithCredentialTTL] as a Go duration ("30s").
	SettingCredentialTTL = "credential_ttl"
	// SettingIdleTimeout is [WithIdleTimeout] as a Go duration ("3m").
	SettingIdleTimeout = "idle_timeout"
	// SettingAPIKeyEnv is [WithAPIKeyEnv] ("ANTHROPIC_API_KEY").
	SettingAPIKeyEnv = "api_key_env"
	// SettingCoalesce is [WithCoalesce] in bytes ("16384"; "0" is off).
	SettingCoalesce = "coalesce"
)

var settingNames = []string{SettingAPIKeyEnv, SettingBackoff, SettingBaseURL, SettingCoalesce, SettingCredentialTTL, SettingIdleTimeout, SettingMaxRetries, SettingMaxRetryWait}

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "Anthropic Messages API provider: provider::anthropic::stream, ::complete and ::models",
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
// provider::anthropic::stream, ::complete and ::models of the engine
// worker "provider-anthropic".
type Worker struct {
	p    *Provider
	kept *agent.Transcripts // transcripts sent, for continuations

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

// Provision builds the provider from the worker's settings (see the
// Setting constants); an unknown or malformed setting is an error wrapping
// engine.ErrInvalidOption. A worker given a provider by [NewWorker] keeps
// it.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	if w.p != nil {
		return nil
	}
	opts, err := settingsOptions(env.Settings[WorkerName])
	if err != nil {
		return err
	}
	p, err := New(opts...)
	if err != nil {
		return err
	}
	w.p = p
	return nil
}

// settingsOptions turns the module's settings into options, in a stable
// order.
func settingsOptions(settings map[string]string) ([]Option, error) {
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var opts []Option
	for _, k := range keys {
		v := settings[k]
		bad := func(what string) error {
			return fmt.Errorf("%w: %s %s=%q is not %s", engine.ErrInvalidOption, WorkerName, k, v, what)
		}
		duration := func() (time.Duration, error) {
			d, err := time.ParseDuration(v)
			if err != nil {
				return 0, bad("a duration")
			}
			return d, nil
		}
		switch k {
		case SettingBaseURL:
			opts = append(opts, WithBaseURL(v))
		case SettingAPIKeyEnv:
			opts = append(opts, WithAPIKeyEnv(v))
		case SettingMaxRetries, SettingCoalesce:
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, bad("an integer")
			}
			if k == SettingMaxRetries {
				opts = append(opts, WithMaxRetries(n))
			} else {
				opts = append(opts, WithCoalesce(n))
			}
		case SettingBackoff, SettingMaxRetryWait, SettingCredentialTTL, SettingIdleTimeout:
			d, err := duration()
			if err != nil {
				return nil, err
			}
			switch k {
			case SettingBackoff:
				opts = append(opts, WithBackoff(d))
			case SettingMaxRetryWait:
				opts = append(opts, WithMaxRetryWait(d))
			case SettingCredentialTTL:
				opts = append(opts, WithCredentialTTL(d))
			default:
				opts = append(opts, WithIdleTimeout(d))
			}
		default:
			return nil, fmt.Errorf("%w: %s has no setting %q (want one of %s)", engine.ErrInvalidOption, WorkerName, k, strings.Join(settingNames, ", "))
		}
	}
	return opts, nil
}

// Start registers the three functions on e. It returns [ErrStarted] when
// called twice and engine.ErrClosed after Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	return w.eps.Start(ctx, e, WorkerName, "Anthropic Messages API provider", func() ([]engine.Function, error) {
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
		return []engine.Function{
			{
				ID:             StreamFunction,
				Description:    "Stream Claude's answer to messages into a channel as model events; replies {stop_reason, kind?} once the stream has ended.",
				RequestSchema:  streamRequestSchema,
				ResponseSchema: streamResponseSchema,
				Timeout:        FunctionTimeout,
				Handler:        w.streamHandler(e, done),
			},
			{
				ID:             CompleteFunction,
				Description:    "Answer messages with Claude's final assistant message.",
				RequestSchema:  completeRequestSchema,
				ResponseSchema: `{"type":"object","required":["message"],"properties":{"message":` + messageSchema + `}}`,
				Timeout:        FunctionTimeout,
				Handler:        w.completeHandler(e, done),
			},
			{
				ID:             ModelsFunction,
				Description:    "List the models the Anthropic API serves (GET /v1/models).",
				RequestSchema:  modelsRequestSchema,
				ResponseSchema: modelsResponseSchema,
				Idempotent:     true,
				Timeout:        ModelsTimeout,
				Handler:        w.modelsHandler(e, done),
			},
		}, nil
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
		req.Messages = msgs
		ctx, release := done.Bind(ctx)
		defer release()
		resp, err := w.p.stream(ctx, e, req, r.Codec)
		if err == nil {
			resp.TranscriptKept = w.kept.Keep(req.Transcript, req.Messages)
		}
		return resp, err
	}
}

func (w *Worker) completeHandler(e *engine.Engine, done *workers.Shutdown) engine.Handler {
	return engine.Typed(func(ctx context.Context, req CompleteRequest) (CompleteResponse, error) {
		ctx, release := done.Bind(ctx)
		defer release()
		msg, err := w.p.Complete(ctx, e, req)
		return CompleteResponse{Message: msg}, err
	})
}

func (w *Worker) modelsHandler(e *engine.Engine, done *workers.Shutdown) engine.Handler {
	return engine.Typed(func(ctx context.Context, _ ModelsRequest) (ModelsResponse, error) {
		ctx, release := done.Bind(ctx)
		defer release()
		return w.p.Models(ctx, e)
	})
}

// CompleteResponse is provider::anthropic::complete's answer, the same
// shape as every provider's: {message}.
type CompleteResponse struct {
	Message agent.Message `json:"message"`
}

// unvalidatedStream is a StreamRequest without its Validate method.
type unvalidatedStream StreamRequest

package openai

import (
	"context"
	"fmt"
	"maps"
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

// WorkerName is the name of the module and of its engine worker, whatever
// the provider name.
const WorkerName = "provider-openai"

// FunctionTimeout bounds one call of a function (the caller's shorter
// budget wins): reasoning models may think for minutes.
const FunctionTimeout = 10 * time.Minute

// Settings of the module (workers.Env.Settings["provider-openai"]).
const (
	// SettingName is [WithName] ("ollama").
	SettingName = "name"
	// SettingBaseURL is [WithBaseURL] ("http://localhost:11434/v1").
	SettingBaseURL = "base_url"
	// SettingAPIKeyEnv is [WithAPIKeyEnv] ("MOONSHOT_API_KEY").
	SettingAPIKeyEnv = "api_key_env"
	// SettingRequireKey is [WithRequireKey] ("true" or "false").
	SettingRequireKey = "require_key"
	// SettingMaxRetries is [WithMaxRetries] ("2").
	SettingMaxRetries = "max_retries"
	// SettingMaxTokensField is [WithMaxTokensField] ("max_tokens").
	SettingMaxTokensField = "max_tokens_field"
	// SettingReasoningEffort is [WithReasoningEffort] ("never").
	SettingReasoningEffort = "reasoning_effort"
	// SettingCoalesce is [WithCoalesce] in bytes ("16384"; "0" is off).
	SettingCoalesce = "coalesce"
	// SettingIdleTimeout is [WithIdleTimeout] as a Go duration ("3m").
	SettingIdleTimeout = "idle_timeout"
	// SettingHeaderPrefix prefixes [WithHeader] settings:
	// "header.OpenAI-Organization" = "org-…".
	SettingHeaderPrefix = "header."
)

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "OpenAI-compatible model provider (OpenAI, ollama, vLLM, LM Studio, kimi): provider::<name>::stream, ::complete, ::models",
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

// Worker serves a [Provider] on the bus as provider::<name>::stream,
// ::complete and ::models of the engine worker "provider-openai".
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

// Provision builds the provider from the worker's settings (the Setting*
// constants; an unknown setting is an error) with env's logger. A worker
// given a provider by [NewWorker] keeps it.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	if w.p != nil {
		return nil
	}
	opts, err := settingsOptions(env.Settings[WorkerName])
	if err != nil {
		return err
	}
	if env.Logger != nil {
		opts = append(opts, WithLogger(env.Logger))
	}
	p, err := New(opts...)
	if err != nil {
		return err
	}
	w.p = p
	return nil
}

// settingsOptions turns the module's settings into options, in key order.
func settingsOptions(settings map[string]string) ([]Option, error) {
	keys := slices.Sorted(maps.Keys(settings))
	var opts []Option
	for _, k := range keys {
		v := settings[k]
		switch k {
		case SettingName:
			opts = append(opts, WithName(v))
		case SettingBaseURL:
			opts = append(opts, WithBaseURL(v))
		case SettingAPIKeyEnv:
			opts = append(opts, WithAPIKeyEnv(v))
		case SettingRequireKey:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("%w: %s %s=%q is not a boolean", engine.ErrInvalidOption, WorkerName, k, v)
			}
			opts = append(opts, WithRequireKey(b))
		case SettingMaxRetries, SettingCoalesce:
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("%w: %s %s=%q is not an integer", engine.ErrInvalidOption, WorkerName, k, v)
			}
			if k == SettingMaxRetries {
				opts = append(opts, WithMaxRetries(n))
			} else {
				opts = append(opts, WithCoalesce(n))
			}
		case SettingIdleTimeout:
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("%w: %s %s=%q is not a duration", engine.ErrInvalidOption, WorkerName, k, v)
			}
			opts = append(opts, WithIdleTimeout(d))
		case SettingMaxTokensField:
			opts = append(opts, WithMaxTokensField(v))
		case SettingReasoningEffort:
			opts = append(opts, WithReasoningEffort(v))
		default:
			name, ok := strings.CutPrefix(k, SettingHeaderPrefix)
			if !ok {
				return nil, fmt.Errorf("%w: %s has no setting %q (want %s, %s, %s, %s, %s, %s, %s, %s, %s or %s<Name>)", engine.ErrInvalidOption, WorkerName, k,
					SettingName, SettingBaseURL, SettingAPIKeyEnv, SettingRequireKey, SettingMaxRetries, SettingMaxTokensField, SettingReasoningEffort, SettingCoalesce, SettingIdleTimeout, SettingHeaderPrefix)
			}
			opts = append(opts, WithHeader(name, v))
		}
	}
	return opts, nil
}

// Provider is the provider the worker serves (nil before Provision or
// Start).
func (w *Worker) Provider() *Provider {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.p
}

// Start registers the three functions on e. It returns [ErrStarted] when
// called twice and engine.ErrClosed after Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	return w.eps.Start(ctx, e, WorkerName, "OpenAI-compatible model provider", func() ([]engine.Function, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.p == nil {
			p, err := New()
			if err != nil {
				return nil, err
			}
			w.p = p
		}
		p := w.p
		done := workers.NewShutdown(errShuttingDown)
		w.done = done
		return []engine.Function{
			{
				ID:             p.StreamFunction(),
				Description:    "Stream the model's answer to messages into a channel as model events; replies {stop_reason, kind?} once the stream has ended.",
				RequestSchema:  streamRequestSchema,
				ResponseSchema: streamResponseSchema,
				Timeout:        FunctionTimeout,
				Handler:        streamHandler(p, w.kept, e, done),
			},
			{
				ID:             p.CompleteFunction(),
				Description:    "Answer messages with the model's final assistant message.",
				RequestSchema:  completeRequestSchema,
				ResponseSchema: completeResponseSchema,
				Idempotent:     true,
				Timeout:        FunctionTimeout,
				Handler:        completeHandler(p, e, done),
			},
			{
				ID:             p.ModelsFunction(),
				Description:    "List the models the server serves (GET /models).",
				RequestSchema:  modelsRequestSchema,
				ResponseSchema: modelsResponseSchema,
				Idempotent:     true,
				Timeout:        time.Minute,
				Handler:        modelsHandler(p, e, done),
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
func streamHandler(p *Provider, kept *agent.Transcripts, e *engine.Engine, done *workers.Shutdown) engine.Handler {
	return func(ctx context.Context, r *engine.Request) (any, error) {
		var req agent.ProviderRequest
		if err := r.Bind(&req); err != nil {
			return nil, err
		}
		msgs, err := kept.Resolve(req.Transcript, req.Messages)
		if err != nil {
			return nil, workers.TranscriptError(err)
		}
		req.Messages = msgs
		ctx, release := done.Bind(ctx)
		defer release()
		resp, err := p.Stream(ctx, e, req, r.Codec)
		if err == nil {
			resp.TranscriptKept = kept.Keep(req.Transcript, req.Messages)
		}
		return resp, err
	}
}

func completeHandler(p *Provider, e *engine.Engine, done *workers.Shutdown) engine.Handler {
	return engine.Typed(func(ctx context.Context, req agent.ProviderRequest) (CompleteResponse, error) {
		ctx, release := done.Bind(ctx)
		defer release()
		return p.Complete(ctx, e, req)
	})
}

// modelsHandler takes {} or an empty payload.
func modelsHandler(p *Provider, e *engine.Engine, done *workers.Shutdown) engine.Handler {
	return func(ctx context.Context, r *engine.Request) (any, error) {
		if len(strings.TrimSpace(string(r.Data))) > 0 {
			var req ModelsRequest
			if err := r.Bind(&req); err != nil {
				return nil, err
			}
		}
		ctx, release := done.Bind(ctx)
		defer release()
		return p.Models(ctx, e)
	}
}

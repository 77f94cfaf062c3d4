package web

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "web"

// FetchFunction is the function id the worker serves.
const FetchFunction = "web::fetch"

// Settings of the module (workers.Env.Settings["web"]).
const (
	// SettingAllowPrivate sets [WithAllowPrivate] ("true" or "false").
	SettingAllowPrivate = "allow_private"
	// SettingMaxBytes sets [WithMaxBytes] (bytes, a decimal integer).
	SettingMaxBytes = "max_bytes"
)

// functionTimeout bounds one call: the longest fetch plus room to answer.
// A caller's shorter budget (Iii-Timeout-Ms) wins.
const functionTimeout = MaxTimeout + 5*time.Second

// replyRoom is what a reply keeps free of content for its headers.
const replyRoom = 1 << 10

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "web fetch: web::fetch GETs one public http(s) URL and returns its text, refusing internal addresses",
		New:         func() workers.Worker { return NewWorker() },
	})
}

var (
	_ workers.Worker      = (*Worker)(nil)
	_ workers.Provisioner = (*Worker)(nil)
	_ workers.Closer      = (*Worker)(nil)
)

// Worker serves a [Fetcher] on the bus as web::fetch on the engine worker
// "web".
type Worker struct {
	opts     []Option
	eps      workers.Endpoints
	shutdown *workers.Shutdown

	mu      sync.Mutex
	fetcher *Fetcher
}

// NewWorker returns a worker whose fetcher is built with opts at Start.
// The module registry builds one with no options.
func NewWorker(opts ...Option) *Worker {
	return &Worker{
		opts:     opts,
		shutdown: workers.NewShutdown(wire.Errorf(wire.CodeUnavailable, "web worker is shutting down")),
	}
}

// Provision reads the settings [SettingAllowPrivate] and [SettingMaxBytes];
// anything else is an error.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	settings := env.Settings[WorkerName]
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		v := settings[k]
		var opt Option
		switch k {
		case SettingAllowPrivate:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%w: %s %s=%q is not a boolean", engine.ErrInvalidOption, WorkerName, k, v)
			}
			opt = WithAllowPrivate(b)
		case SettingMaxBytes:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: %s %s=%q is not an integer", engine.ErrInvalidOption, WorkerName, k, v)
			}
			opt = WithMaxBytes(n)
		default:
			return fmt.Errorf("%w: %s has no setting %q (want %s or %s)", engine.ErrInvalidOption, WorkerName, k, SettingAllowPrivate, SettingMaxBytes)
		}
		if _, err := buildOptions([]Option{opt}); err != nil {
			return err
		}
		w.opts = append(w.opts, opt)
	}
	return nil
}

// Fetcher is the worker's fetcher, nil before Start.
func (w *Worker) Fetcher() *Fetcher {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fetcher
}

// Start builds the fetcher and registers web::fetch on e. It returns
// [ErrStarted] when called twice and engine.ErrClosed after Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	return w.eps.Start(ctx, e, WorkerName, "web fetch: one GET of a public http(s) URL, returned as text", func() ([]engine.Function, error) {
		opts := append([]Option{WithLogger(e.Logger().With("worker", WorkerName))}, w.opts...)
		f, err := NewFetcher(opts...)
		if err != nil {
			return nil, err
		}
		w.mu.Lock()
		w.fetcher = f
		w.mu.Unlock()
		return []engine.Function{{
			ID:             FetchFunction,
			Description:    "Fetch one public http(s) URL with GET and return its status, content type and content as text (HTML converted to readable text with links as [text](url)); internal addresses are refused.",
			RequestSchema:  fetchRequestSchema,
			ResponseSchema: fetchResponseSchema,
			Idempotent:     true,
			Timeout:        functionTimeout,
			Skill:          fetchSkill,
			Handler:        w.fetch(f, e.Conn().MaxPayload()),
		}}, nil
	})
}

// fetch is the handler: it fetches, then encodes the answer itself so the
// content can be cut to fit in one message (maxPayload).
func (w *Worker) fetch(f *Fetcher, maxPayload int64) engine.Handler {
	return func(ctx context.Context, r *engine.Request) (any, error) {
		var req FetchRequest
		if err := r.Bind(&req); err != nil {
			return nil, err
		}
		ctx, release := w.shutdown.Bind(ctx)
		defer release()
		ctx, cancel := engine.WithReplyMargin(ctx)
		defer cancel()
		res, err := f.Fetch(ctx, req)
		if err != nil {
			return nil, err
		}
		return encodeFitting(r.Codec, res, maxPayload-replyRoom)
	}
}

// encodeFitting encodes res with codec in at most limit bytes, cutting its
// content (and marking it truncated) when it is too long. The cut is
// proportional to the content's encoded size (JSON may spend six bytes on
// one); after a few rounds it falls back to cutting the excess, which
// always fits since every byte of content takes at least one encoded.
func encodeFitting(codec wire.Codec, res FetchResponse, limit int64) (engine.Raw, error) {
	body, err := codec.Marshal(res)
	if err != nil || int64(len(body)) <= limit {
		return encoded(body, err)
	}
	res.Truncated = true
	bare := res
	bare.Content = ""
	fields, err := codec.Marshal(bare)
	if err != nil {
		return encoded(nil, err)
	}
	room := limit - int64(len(fields))
	if room <= 0 {
		return nil, wire.Errorf(wire.CodeInternal, "response fields alone exceed %d bytes", limit)
	}
	for round := 0; int64(len(body)) > limit; round++ {
		n := int64(len(res.Content))
		keep := n * room / max(int64(len(body)-len(fields)), 1)
		if round >= 4 {
			keep = min(keep, n-(int64(len(body))-limit))
		}
		res.Content = clip(res.Content, int(max(keep, 0)))
		if body, err = codec.Marshal(res); err != nil {
			return encoded(nil, err)
		}
		if res.Content == "" && int64(len(body)) > limit {
			return nil, wire.Errorf(wire.CodeInternal, "response does not fit in %d bytes", limit)
		}
	}
	return body, nil
}

func encoded(body []byte, err error) (engine.Raw, error) {
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "response does not encode")
	}
	return body, nil
}

// Close ends the fetches in flight (they answer unavailable), stops the
// endpoint, waiting until ctx ends for calls to return, and closes the
// fetcher's idle connections. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error {
	err := w.eps.Close(ctx, w.shutdown.Close)
	if f := w.Fetcher(); f != nil {
		_ = f.Close(ctx)
	}
	return err
}

package sessiontree

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "session"

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "session tree: session::create, ::append, ::messages, ::fork, ::tree, ::list, ... over a JetStream stream and KV bucket",
		New:         func() workers.Worker { return NewWorker() },
	})
}

var (
	_ workers.Worker      = (*Worker)(nil)
	_ workers.Provisioner = (*Worker)(nil)
	_ workers.Closer      = (*Worker)(nil)
)

// Worker serves a [Store] on the bus as the session::* functions of the
// engine worker "session" (all but session::inbox_push and
// session::inbox_drain, which the orchestrator serves).
type Worker struct {
	opts []Option

	eps workers.Endpoints

	mu    sync.Mutex
	store *Store
}

// NewWorker returns a worker whose store is opened with opts at Start. The
// module registry builds one with no options.
func NewWorker(opts ...Option) *Worker { return &Worker{opts: opts} }

// Provision reads the settings: "max_entry_size" (bytes, see
// [WithMaxEntrySize]) and "meta_delay" (a duration, see
// [WithMetaDelay]); anything else is an error.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	settings := env.Settings[WorkerName]
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		switch k {
		case "max_entry_size":
			n, err := strconv.Atoi(settings[k])
			if err != nil {
				return fmt.Errorf("%w: %s.max_entry_size %q is not a number", engine.ErrInvalidOption, WorkerName, settings[k])
			}
			w.opts = append(w.opts, WithMaxEntrySize(n))
		case "meta_delay":
			d, err := time.ParseDuration(settings[k])
			if err != nil {
				return fmt.Errorf("%w: %s.meta_delay %q is not a duration", engine.ErrInvalidOption, WorkerName, settings[k])
			}
			w.opts = append(w.opts, WithMetaDelay(d))
		default:
			return fmt.Errorf("%w: %s has no setting %q", engine.ErrInvalidOption, WorkerName, k)
		}
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

// Start opens the store (creating the stream and the bucket when missing)
// and registers the functions on e. It returns [ErrStarted] when called
// twice and engine.ErrClosed after Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	return w.eps.Start(ctx, e, WorkerName, "session tree: durable, branching session history", func() ([]engine.Function, error) {
		s, err := Open(ctx, e, w.opts...)
		if err != nil {
			return nil, err
		}
		w.mu.Lock()
		w.store = s
		w.mu.Unlock()
		return s.Functions(), nil
	})
}

// Close stops the endpoints, waiting for calls in flight until ctx ends.
// The stream and the bucket stay. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error {
	err := w.eps.Close(ctx, nil)
	if s := w.Store(); s != nil {
		s.Close()
	}
	return err
}

// Functions are the store's functions, for an engine worker of the
// embedder's choice ([Worker.Start] registers them on "session").
func (s *Store) Functions() []engine.Function {
	return []engine.Function{
		{
			ID:             CreateFunction,
			Description:    "Create an empty session; answers its id (a given session_id that exists is a conflict).",
			RequestSchema:  createRequestSchema,
			ResponseSchema: createResponseSchema,
			Skill:          createSkill,
			Handler:        engine.Typed(s.Create),
		},
		{
			ID:             EnsureFunction,
			Description:    "Create the session unless it exists; answers {session_id, created}.",
			RequestSchema:  ensureRequestSchema,
			ResponseSchema: ensureResponseSchema,
			Idempotent:     true,
			Skill:          ensureSkill,
			Handler:        engine.Typed(s.Ensure),
		},
		{
			ID:             GetFunction,
			Description:    "Read a session's metadata: display name, times, active leaf, entry count, fork origin, summary.",
			RequestSchema:  sessionRequestSchema,
			ResponseSchema: metaSchema,
			Idempotent:     true,
			Skill:          getSkill,
			Handler: engine.Typed(func(ctx context.Context, req SessionRequest) (Meta, error) {
				return s.Meta(ctx, req.SessionID)
			}),
		},
		{
			ID:             AppendFunction,
			Description:    "Append one entry (or message) under parent_id or the active leaf, and make it the active leaf; answers {entry_id}.",
			RequestSchema:  appendRequestSchema,
			ResponseSchema: appendResponseSchema,
			Skill:          appendSkill,
			Handler:        engine.Typed(s.Append),
		},
		{
			ID:             AppendBatchFunction,
			Description:    "Append a chain of entries (or messages) under parent_id or the active leaf; the last becomes the active leaf; answers {entry_ids}.",
			RequestSchema:  appendBatchRequestSchema,
			ResponseSchema: appendBatchResponseSchema,
			Skill:          appendBatchSkill,
			Handler:        engine.Typed(s.AppendBatch),
		},
		{
			ID:             MessagesFunction,
			Description:    "The model-facing messages of the path from the root to leaf (default: the active leaf), oldest first, compactions applied; a long path comes in pages (truncated, then ask again with leaf and after).",
			RequestSchema:  messagesRequestSchema,
			ResponseSchema: messagesResponseSchema,
			Idempotent:     true,
			Skill:          messagesSkill,
			Handler:        pageHandler(s, s.messagesPage),
		},
		{
			ID:             EntriesFunction,
			Description:    "The raw entries of the path from the root to leaf (default: the active leaf), root first; a long path comes in pages (truncated, then ask again with leaf and after).",
			RequestSchema:  entriesRequestSchema,
			ResponseSchema: entriesResponseSchema,
			Idempotent:     true,
			Skill:          entriesSkill,
			Handler:        pageHandler(s, s.entriesPage),
		},
		{
			ID:             ForkFunction,
			Description:    "Create a session whose history is the path up to and including from_entry_id (shared, not copied); answers its id.",
			RequestSchema:  forkRequestSchema,
			ResponseSchema: createResponseSchema,
			Skill:          forkSkill,
			Handler:        engine.Typed(s.Fork),
		},
		{
			ID:             CloneFunction,
			Description:    "Fork the session at leaf (default: the active leaf); answers the new session's id.",
			RequestSchema:  cloneRequestSchema,
			ResponseSchema: createResponseSchema,
			Skill:          cloneSkill,
			Handler:        engine.Typed(s.Clone),
		},
		{
			ID:             TreeFunction,
			Description:    "Every entry of the session (and the history a fork shares) with parent, type, one-line summary and child count; a big tree comes in pages (truncated, then ask again with after).",
			RequestSchema:  treeRequestSchema,
			ResponseSchema: treeResponseSchema,
			Idempotent:     true,
			Skill:          treeSkill,
			Handler:        pageHandler(s, s.treePage),
		},
		{
			ID:             ListFunction,
			Description:    "Page through sessions, most recently updated first, each with its one-line summary.",
			RequestSchema:  listRequestSchema,
			ResponseSchema: listResponseSchema,
			Idempotent:     true,
			Skill:          listSkill,
			Handler:        pageHandler(s, s.listPage),
		},
		{
			ID:             SetActiveLeafFunction,
			Description:    "Make an entry of the session's history the active leaf (switch branch, rewind).",
			RequestSchema:  setActiveLeafRequestSchema,
			ResponseSchema: setActiveLeafResponseSchema,
			Idempotent:     true,
			Skill:          setActiveLeafSkill,
			Handler:        engine.Typed(s.SetActiveLeaf),
		},
		{
			ID:             ExportHTMLFunction,
			Description:    "Render the path to leaf (default: the active leaf) as one self-contained HTML page; a long one comes in parts to concatenate (truncated, then ask again with leaf and after).",
			RequestSchema:  exportHTMLRequestSchema,
			ResponseSchema: exportHTMLResponseSchema,
			Idempotent:     true,
			Skill:          exportHTMLSkill,
			Handler:        pageHandler(s, s.exportPage),
		},
	}
}

package directory

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/internal/answer"
)

// WorkerName is the name of the module and of its engine worker.
const WorkerName = "directory"

// Function ids the worker serves.
const (
	GetFunction   = "directory::skills::get"
	ListFunction  = "directory::skills::list"
	IndexFunction = "directory::skills::index"
)

// Settings of the module (workers.Env.Settings["directory"]).
const (
	// SettingDir is the skills folder; a relative path is taken from the
	// node's home. Default: <home>/skills ([DefaultFolderName]); none when
	// the node has no home.
	SettingDir = "dir"
	// SettingPollInterval is [WithPollInterval] as a Go duration ("2s").
	SettingPollInterval = "poll_interval"
)

// overviewPublishTimeout bounds the publication of directory/overview at
// Start.
const overviewPublishTimeout = 5 * time.Second

func init() {
	workers.Register(workers.Module{
		Name:        WorkerName,
		Description: "skills directory: directory::skills::get, ::list, ::index over published skills and the skills folder",
		New:         func() workers.Worker { return &Worker{} },
	})
}

var (
	_ workers.Worker      = (*Worker)(nil)
	_ workers.Provisioner = (*Worker)(nil)
	_ workers.Closer      = (*Worker)(nil)
)

// Worker serves a [Directory] on the bus as the three functions of the
// engine worker "directory", and publishes the skills of those functions
// and the overview skill "directory/overview".
type Worker struct {
	opts []Option

	served workers.Served[*Directory]
}

// NewWorker returns a worker whose directory is opened with opts at Start.
// The module registry builds one with no options and reads its settings
// at Provision.
func NewWorker(opts ...Option) *Worker { return &Worker{opts: opts} }

// Provision reads the module's settings: [SettingDir] (default
// <home>/skills) and [SettingPollInterval]. Any other setting is an error.
func (w *Worker) Provision(_ context.Context, env workers.Env) error {
	var pre, post []Option
	if env.Home != "" {
		pre = append(pre, WithDir(filepath.Join(env.Home, DefaultFolderName)))
	}
	if env.Logger != nil {
		pre = append(pre, WithLogger(env.Logger.With("worker", WorkerName)))
	}
	settings := env.Settings[WorkerName]
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		v := settings[k]
		switch k {
		case SettingDir:
			if v == "" {
				return fmt.Errorf("%w: %s %s is empty", engine.ErrInvalidOption, WorkerName, k)
			}
			if !filepath.IsAbs(v) && env.Home != "" {
				v = filepath.Join(env.Home, v)
			}
			post = append(post, WithDir(v))
		case SettingPollInterval:
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%w: %s %s=%q is not a duration", engine.ErrInvalidOption, WorkerName, k, v)
			}
			post = append(post, WithPollInterval(d))
		default:
			return fmt.Errorf("%w: %s has no setting %q (want %s or %s)", engine.ErrInvalidOption, WorkerName, k, SettingDir, SettingPollInterval)
		}
	}
	opts := slices.Concat(pre, w.opts, post)
	// Surface a bad option now rather than at Start.
	if _, err := buildOptions(opts); err != nil {
		return err
	}
	w.opts = opts
	return nil
}

// Directory is the worker's directory, nil before Start.
func (w *Worker) Directory() *Directory {
	d, _ := w.served.Resource()
	return d
}

// Start opens the directory (creating the skills bucket when missing,
// loading the bucket and the folder), registers the three functions on e
// with their skills, and publishes "directory/overview". It returns
// [ErrStarted] when called twice and engine.ErrClosed after Close.
func (w *Worker) Start(ctx context.Context, e *engine.Engine) error {
	err := w.served.Start(ctx, e, WorkerName, "skills directory: one markdown document per function", func() (*Directory, []engine.Function, error) {
		d, err := Open(ctx, e, w.opts...)
		if err != nil {
			return nil, nil, err
		}
		return d, d.functions(), nil
	})
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, overviewPublishTimeout)
	defer cancel()
	if err := e.PublishSkill(pctx, WorkerName, OverviewName, OverviewSkill); err != nil {
		// The functions serve without it; the index lacks one line.
		if d := w.Directory(); d != nil {
			d.logger.Warn("skill not published", "skill", WorkerName+"/"+OverviewName, "error", err)
		}
	}
	return nil
}

// Close stops the endpoints, waiting for calls in flight until ctx ends,
// then stops following the bucket and the folder. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error { return w.served.Close(ctx) }

// GetRequest is the request of directory::skills::get.
type GetRequest struct {
	// ID is "iii://<worker>/<name>" or "<worker>/<name>".
	ID string `json:"id"`
}

// Validate checks the id ([ParseID]).
func (r GetRequest) Validate() error {
	if _, err := ParseID(r.ID); err != nil {
		return invalidWrap(err)
	}
	return nil
}

// ListRequest is the request of directory::skills::list.
type ListRequest struct {
	// Worker keeps only that worker's skills.
	Worker string `json:"worker,omitempty"`
	// Type keeps only skills of that type ("function", "overview", ...).
	Type string `json:"type,omitempty"`
	// After continues a truncated list: the id of the last skill received;
	// only skills sorted after it are listed.
	After string `json:"after,omitempty"`
}

// Validate checks that the filters are names and After a skill id.
func (r ListRequest) Validate() error {
	if err := validateFilters(r.Worker, r.Type); err != nil {
		return err
	}
	if r.After != "" {
		if _, err := ParseID(r.After); err != nil {
			return invalidWrap(err)
		}
	}
	return nil
}

// ListResponse is the response of directory::skills::list.
type ListResponse struct {
	// Skills are sorted by id.
	Skills []Summary `json:"skills"`
	// Truncated is set when the server's max payload cut the list short:
	// ask again with After set to the id of the last skill.
	Truncated bool `json:"truncated,omitempty"`
}

// listHeadroom is kept free of the server's max payload for the reply
// envelope around the summaries.
const listHeadroom = 1 << 10

// listPage is the page of skills (sorted by id) after the id after that
// fits p; Truncated says more follow. It holds at least one skill when any
// follows, so paging always moves on.
func listPage(skills []Summary, after string, p *answer.Pager) (ListResponse, error) {
	if after != "" {
		sid, err := ParseID(after)
		if err != nil {
			return ListResponse{}, invalidWrap(err)
		}
		after = sid.String()
		skills = skills[sort.Search(len(skills), func(i int) bool { return skills[i].ID > after }):]
	}
	page, truncated, err := answer.Page(skills, p)
	return ListResponse{Skills: page, Truncated: truncated}, err
}

// IndexRequest is the (empty) request of directory::skills::index.
type IndexRequest struct{}

// Validate accepts every index request.
func (IndexRequest) Validate() error { return nil }

func (d *Directory) functions() []engine.Function {
	return []engine.Function{
		{
			ID:             GetFunction,
			Description:    "Get one skill document (how and when to use a function) by id, iii://<worker>/<function> or <worker>/<function>.",
			RequestSchema:  getRequestSchema,
			ResponseSchema: getResponseSchema,
			Idempotent:     true,
			Skill:          getSkill,
			Handler: engine.Typed(func(_ context.Context, req GetRequest) (Skill, error) {
				return d.Get(req.ID)
			}),
		},
		{
			ID:             ListFunction,
			Description:    "List skills (id, link, title, type, function_id, description; no body) sorted by id, optionally of one worker and one type.",
			RequestSchema:  listRequestSchema,
			ResponseSchema: listResponseSchema,
			Idempotent:     true,
			Skill:          listSkill,
			Handler: func(_ context.Context, r *engine.Request) (any, error) {
				var req ListRequest
				if err := r.Bind(&req); err != nil {
					return nil, err
				}
				s, err := d.List(req.Worker, req.Type)
				if err != nil {
					return nil, err
				}
				return listPage(s, req.After, answer.NewPager(r.Codec, d.maxPayload()))
			},
		},
		{
			ID:             IndexFunction,
			Description:    "The skills index: one overview per worker and the whole index as compact markdown (one line per skill) for a system prompt.",
			RequestSchema:  indexRequestSchema,
			ResponseSchema: indexResponseSchema,
			Idempotent:     true,
			Skill:          indexSkill,
			Handler: func(_ context.Context, r *engine.Request) (any, error) {
				var req IndexRequest
				if err := r.Bind(&req); err != nil {
					return nil, err
				}
				return fitIndex(d.Index(), r.Codec, int(d.maxPayload())-listHeadroom)
			},
		},
	}
}

package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// FunctionInfo is one entry of the live function catalog.
type FunctionInfo struct {
	ID             string          `json:"id"`
	Worker         string          `json:"worker"`
	Description    string          `json:"description,omitempty"`
	RequestSchema  json.RawMessage `json:"request_schema,omitempty"`
	ResponseSchema json.RawMessage `json:"response_schema,omitempty"`
	Idempotent     bool            `json:"idempotent,omitempty"`
	// TimeoutMs is the function's declared time limit (0: none declared).
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// DetailsOmitted says engine::functions::list left the description
	// and the schemas out: the entry alone, with them, does not fit the
	// max payload. [Engine.FunctionsList] never sets it.
	DetailsOmitted bool `json:"details_omitted,omitempty"`
}

// WorkerInfo is one running worker instance.
type WorkerInfo struct {
	Name      string   `json:"name"`
	ID        string   `json:"id"`
	Version   string   `json:"version"`
	Functions []string `json:"functions"`
	// FunctionsOmitted says engine::workers::list left the function ids
	// out: the entry alone, with them, does not fit the max payload.
	// [Engine.WorkersList] never sets it.
	FunctionsOmitted bool `json:"functions_omitted,omitempty"`
}

// Catalog discovery waits: overall, and quiet time after the last reply.
const (
	discoverMax   = 1500 * time.Millisecond
	discoverQuiet = 150 * time.Millisecond
)

// discoverPendingBytes bounds the $SRV.INFO replies a discovery holds
// unread. nats.go's default, 64 MiB, is 64 replies at the default max
// payload: a bus of many workers with large schemas answers faster than
// the collection decodes, and the client dropped the rest unseen. Past
// this bound replies are still dropped, but counted and logged, and the
// catalog answers say incomplete. A variable for the tests.
var discoverPendingBytes = 256 << 20

// Discover asks every NATS service on the bus for its info ($SRV.INFO) and
// returns the instances that serve at least one function subject
// ("iii.fn.…"), whatever language they are written in. It collects replies
// until none arrives for a short quiet period or ctx's deadline, and
// returns what arrived; none when no service is on the bus. A ctx
// canceled during the collection, or ended before it, is its error
// (canceled or timeout): nothing is returned as if it were the catalog.
// Replies the client had to drop (more than 256 MiB unread at once) are
// logged with their count; engine::functions::list and
// engine::workers::list then say incomplete.
func (e *Engine) Discover(ctx context.Context) ([]micro.Info, error) {
	infos, _, err := e.discover(ctx)
	return infos, err
}

// discover is [Engine.Discover], with the count of replies dropped
// unread: when not 0, the catalog lacks workers.
func (e *Engine) discover(ctx context.Context) ([]micro.Info, int, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, wire.FromNATS(err)
	}
	inbox := e.nc.NewRespInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, 0, wire.FromNATS(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(nats.DefaultSubPendingMsgsLimit, discoverPendingBytes); err != nil {
		return nil, 0, wire.FromNATS(err)
	}
	subj, _ := micro.ControlSubject(micro.InfoVerb, "", "")
	if err := e.nc.PublishRequest(subj, inbox, nil); err != nil {
		return nil, 0, wire.FromNATS(err)
	}
	deadline := time.Now().Add(discoverMax)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var out []micro.Info
	received := 0
	done := func() ([]micro.Info, int, error) {
		dropped, _ := sub.Dropped()
		if dropped > 0 {
			e.opts.logger.Warn("catalog discovery dropped service info replies: the catalog is incomplete",
				"dropped", dropped, "received", received, "pending_bytes_limit", discoverPendingBytes)
		}
		return out, dropped, nil
	}
	wait := discoverMax
	for {
		wctx, wcancel := context.WithTimeout(cctx, wait)
		msg, err := sub.NextMsgWithContext(wctx)
		wcancel()
		if err != nil {
			switch {
			case errors.Is(ctx.Err(), context.Canceled):
				return nil, 0, wire.FromNATS(ctx.Err())
			case errors.Is(err, context.DeadlineExceeded):
				return done() // quiet, or the deadline
			case errors.Is(err, nats.ErrNoResponders):
				return done() // no service on the bus
			case errors.Is(err, nats.ErrSlowConsumer):
				continue // replies were dropped: done counts them
			}
			return nil, 0, wire.FromNATS(err)
		}
		received++
		wait = discoverQuiet
		var info micro.Info
		if json.Unmarshal(msg.Data, &info) != nil {
			continue
		}
		keep := false
		for _, ep := range info.Endpoints {
			if _, err := subjects.FunctionID(ep.Subject); err == nil {
				keep = true
			}
		}
		if keep {
			out = append(out, info)
		}
	}
}

// FunctionsList is the live catalog: one entry per function id, across all
// workers on the bus, sorted by id.
func (e *Engine) FunctionsList(ctx context.Context) ([]FunctionInfo, error) {
	infos, err := e.Discover(ctx)
	if err != nil {
		return nil, err
	}
	return functionsOf(infos), nil
}

// functionsOf is the catalog of infos: one entry per function id, sorted.
func functionsOf(infos []micro.Info) []FunctionInfo {
	byID := map[string]FunctionInfo{}
	for _, info := range infos {
		for _, ep := range info.Endpoints {
			id, err := subjects.FunctionID(ep.Subject)
			if err != nil {
				continue
			}
			if _, dup := byID[id]; dup {
				continue // another replica
			}
			fi := FunctionInfo{ID: id, Worker: info.Name, Description: ep.Metadata[MetaDescription], Idempotent: ep.Metadata[MetaIdempotent] == "true"}
			if ms, err := strconv.ParseInt(ep.Metadata[MetaTimeoutMs], 10, 64); err == nil && ms > 0 {
				fi.TimeoutMs = ms
			}
			if s := ep.Metadata[MetaRequestSchema]; json.Valid([]byte(s)) {
				fi.RequestSchema = json.RawMessage(s)
			}
			if s := ep.Metadata[MetaResponseSchema]; json.Valid([]byte(s)) {
				fi.ResponseSchema = json.RawMessage(s)
			}
			if fi.Description == "" {
				fi.Description = info.Description
			}
			byID[id] = fi
		}
	}
	out := make([]FunctionInfo, 0, len(byID))
	for _, fi := range byID {
		out = append(out, fi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// WorkersList is every worker instance on the bus, sorted by name and id.
func (e *Engine) WorkersList(ctx context.Context) ([]WorkerInfo, error) {
	infos, err := e.Discover(ctx)
	if err != nil {
		return nil, err
	}
	return workersOf(infos), nil
}

// workersOf is the worker instances of infos, sorted by name and id.
func workersOf(infos []micro.Info) []WorkerInfo {
	out := make([]WorkerInfo, 0, len(infos))
	for _, info := range infos {
		wi := WorkerInfo{Name: info.Name, ID: info.ID, Version: info.Version, Functions: []string{}}
		for _, ep := range info.Endpoints {
			if id, err := subjects.FunctionID(ep.Subject); err == nil {
				wi.Functions = append(wi.Functions, id)
			}
		}
		sort.Strings(wi.Functions)
		out = append(out, wi)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Empty is the request of functions that take no arguments.
type Empty struct{}

// FunctionsListRequest is the request of engine::functions::list.
type FunctionsListRequest struct {
	// After pages on: only the functions with a greater id are listed.
	After string `json:"after,omitempty"`
}

// FunctionsListResponse is the reply of engine::functions::list.
type FunctionsListResponse struct {
	Functions []FunctionInfo `json:"functions"`
	// Truncated says more functions follow that did not fit the max
	// payload: ask again with After, the last id.
	Truncated bool `json:"truncated,omitempty"`
	// Incomplete says the discovery dropped service info replies, so
	// functions may be missing (the engine logs how many replies).
	Incomplete bool `json:"incomplete,omitempty"`
}

// WorkersListRequest is the request of engine::workers::list.
type WorkersListRequest struct {
	// After pages on: "<name>/<id>" of the last worker received; only the
	// workers after it by name, then id, are listed. Without a "/" it is
	// a name, and every instance of that name follows.
	After string `json:"after,omitempty"`
}

// WorkersListResponse is the reply of engine::workers::list.
type WorkersListResponse struct {
	Workers []WorkerInfo `json:"workers"`
	// Truncated says more workers follow that did not fit the max
	// payload: ask again with After, "<name>/<id>" of the last.
	Truncated bool `json:"truncated,omitempty"`
	// Incomplete says the discovery dropped service info replies, so
	// workers may be missing (the engine logs how many replies).
	Incomplete bool `json:"incomplete,omitempty"`
}

// catalogHeadroom is kept free of the max payload for the reply's
// headers and the fields around the list.
const catalogHeadroom = 1 << 10

// fitPage is the longest head of items whose encoding in codec fits
// maxPayload, and whether items were left out. The first item always
// goes in, slimmed when it does not fit whole, so paging moves on.
func fitPage[T any](codec wire.Codec, items []T, maxPayload int64, slim func(*T)) ([]T, bool, error) {
	size := func(v *T) (int64, error) {
		b, err := codec.Marshal(v)
		if err != nil {
			return 0, wire.Wrap(wire.CodeInternal, err, "catalog entry does not encode")
		}
		return int64(len(b)) + 1, nil // and a separator
	}
	page := make([]T, 0, min(len(items), 256))
	room := maxPayload - catalogHeadroom
	for i := range items {
		it := items[i]
		sz, err := size(&it)
		if err != nil {
			return nil, false, err
		}
		if sz > room {
			if len(page) > 0 {
				return page, true, nil
			}
			slim(&it)
			if sz, err = size(&it); err != nil {
				return nil, false, err
			}
		}
		room -= sz
		page = append(page, it)
	}
	return page, false, nil
}

// functionsPage answers engine::functions::list: the functions after
// r.After that fit the max payload in codec.
func (e *Engine) functionsPage(ctx context.Context, r FunctionsListRequest, codec wire.Codec) (FunctionsListResponse, error) {
	infos, dropped, err := e.discover(ctx)
	if err != nil {
		return FunctionsListResponse{}, err
	}
	fns := functionsOf(infos)
	fns = fns[sort.Search(len(fns), func(i int) bool { return fns[i].ID > r.After }):]
	page, truncated, err := fitPage(codec, fns, e.nc.MaxPayload(), func(fi *FunctionInfo) {
		fi.Description, fi.RequestSchema, fi.ResponseSchema, fi.DetailsOmitted = "", nil, nil, true
	})
	return FunctionsListResponse{Functions: page, Truncated: truncated, Incomplete: dropped > 0}, err
}

// workersPage answers engine::workers::list: the workers after r.After
// that fit the max payload in codec.
func (e *Engine) workersPage(ctx context.Context, r WorkersListRequest, codec wire.Codec) (WorkersListResponse, error) {
	infos, dropped, err := e.discover(ctx)
	if err != nil {
		return WorkersListResponse{}, err
	}
	ws := workersOf(infos)
	if r.After != "" {
		name, id, _ := strings.Cut(r.After, "/")
		ws = ws[sort.Search(len(ws), func(i int) bool {
			return ws[i].Name > name || ws[i].Name == name && ws[i].ID > id
		}):]
	}
	page, truncated, err := fitPage(codec, ws, e.nc.MaxPayload(), func(wi *WorkerInfo) {
		wi.Functions, wi.FunctionsOmitted = []string{}, true
	})
	return WorkersListResponse{Workers: page, Truncated: truncated, Incomplete: dropped > 0}, err
}

// ServeCatalog starts the "engine" worker with engine::functions::list and
// engine::workers::list. Every replica answers from the live bus, so any
// number of processes may serve it. Each answer fits the max payload: a
// longer list comes in pages (truncated; ask again with after).
func (e *Engine) ServeCatalog() (*Worker, error) {
	w, err := e.Worker("engine", WithDescription("iii engine: the live function catalog"))
	if err != nil {
		return nil, err
	}
	fns := []Function{
		{
			ID: "engine::functions::list",
			Description: "List every function registered on the bus, with its worker and JSON Schemas, by id; " +
				"page on with after, the last id, while truncated.",
			RequestSchema: `{"type":"object","properties":{"after":{"type":"string","description":"the last id of the previous page"}}}`,
			ResponseSchema: `{"type":"object","properties":{"functions":{"type":"array"},` +
				`"truncated":{"type":"boolean","description":"more functions follow: ask again with after, the last id"},` +
				`"incomplete":{"type":"boolean","description":"the discovery dropped replies: functions may be missing"}},"required":["functions"]}`,
			Idempotent: true,
			Handler: func(ctx context.Context, req *Request) (any, error) {
				var r FunctionsListRequest
				if err := req.Bind(&r); err != nil {
					return nil, err
				}
				return e.functionsPage(ctx, r, req.Codec)
			},
		},
		{
			ID: "engine::workers::list",
			Description: "List every worker instance on the bus with the function ids it serves, by name and id; " +
				"page on with after, \"<name>/<id>\" of the last, while truncated.",
			RequestSchema: `{"type":"object","properties":{"after":{"type":"string","description":"<name>/<id> of the last worker of the previous page"}}}`,
			ResponseSchema: `{"type":"object","properties":{"workers":{"type":"array"},` +
				`"truncated":{"type":"boolean","description":"more workers follow: ask again with after, <name>/<id> of the last"},` +
				`"incomplete":{"type":"boolean","description":"the discovery dropped replies: workers may be missing"}},"required":["workers"]}`,
			Idempotent: true,
			Handler: func(ctx context.Context, req *Request) (any, error) {
				var r WorkersListRequest
				if err := req.Bind(&r); err != nil {
					return nil, err
				}
				return e.workersPage(ctx, r, req.Codec)
			},
		},
	}
	for _, fn := range fns {
		if err := w.Register(fn); err != nil {
			_ = w.Close(context.Background())
			return nil, err
		}
	}
	return w, nil
}

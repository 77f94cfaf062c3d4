package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
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
}

// WorkerInfo is one running worker instance.
type WorkerInfo struct {
	Name      string   `json:"name"`
	ID        string   `json:"id"`
	Version   string   `json:"version"`
	Functions []string `json:"functions"`
}

// Catalog discovery waits: overall, and quiet time after the last reply.
const (
	discoverMax   = 1500 * time.Millisecond
	discoverQuiet = 150 * time.Millisecond
)

// Discover asks every NATS service on the bus for its info ($SRV.INFO) and
// returns the instances that serve at least one function subject
// ("iii.fn.…"), whatever language they are written in. It collects replies
// until none arrives for a short quiet period or ctx's deadline, and
// returns what arrived; none when no service is on the bus. A ctx
// canceled during the collection, or ended before it, is its error
// (canceled or timeout): nothing is returned as if it were the catalog.
func (e *Engine) Discover(ctx context.Context) ([]micro.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, wire.FromNATS(err)
	}
	inbox := e.nc.NewRespInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, wire.FromNATS(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	subj, _ := micro.ControlSubject(micro.InfoVerb, "", "")
	if err := e.nc.PublishRequest(subj, inbox, nil); err != nil {
		return nil, wire.FromNATS(err)
	}
	deadline := time.Now().Add(discoverMax)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var out []micro.Info
	wait := discoverMax
	for {
		wctx, wcancel := context.WithTimeout(cctx, wait)
		msg, err := sub.NextMsgWithContext(wctx)
		wcancel()
		if err != nil {
			switch {
			case errors.Is(ctx.Err(), context.Canceled):
				return nil, wire.FromNATS(ctx.Err())
			case errors.Is(err, context.DeadlineExceeded):
				return out, nil // quiet, or the deadline
			case errors.Is(err, nats.ErrNoResponders):
				return out, nil // no service on the bus
			}
			return nil, wire.FromNATS(err)
		}
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
	return out, nil
}

// WorkersList is every worker instance on the bus, sorted by name and id.
func (e *Engine) WorkersList(ctx context.Context) ([]WorkerInfo, error) {
	infos, err := e.Discover(ctx)
	if err != nil {
		return nil, err
	}
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
	return out, nil
}

// Empty is the request of functions that take no arguments.
type Empty struct{}

// FunctionsListResponse is the reply of engine::functions::list.
type FunctionsListResponse struct {
	Functions []FunctionInfo `json:"functions"`
}

// WorkersListResponse is the reply of engine::workers::list.
type WorkersListResponse struct {
	Workers []WorkerInfo `json:"workers"`
}

// ServeCatalog starts the "engine" worker with engine::functions::list and
// engine::workers::list. Every replica answers from the live bus, so any
// number of processes may serve it.
func (e *Engine) ServeCatalog() (*Worker, error) {
	w, err := e.Worker("engine", WithDescription("iii engine: the live function catalog"))
	if err != nil {
		return nil, err
	}
	fns := []Function{
		{
			ID:             "engine::functions::list",
			Description:    "List every function registered on the bus, with its worker and JSON Schemas.",
			RequestSchema:  `{"type":"object"}`,
			ResponseSchema: `{"type":"object","properties":{"functions":{"type":"array"}},"required":["functions"]}`,
			Idempotent:     true,
			Handler: Typed(func(ctx context.Context, _ Empty) (FunctionsListResponse, error) {
				fns, err := e.FunctionsList(ctx)
				return FunctionsListResponse{Functions: fns}, err
			}),
		},
		{
			ID:             "engine::workers::list",
			Description:    "List every worker instance on the bus with the function ids it serves.",
			RequestSchema:  `{"type":"object"}`,
			ResponseSchema: `{"type":"object","properties":{"workers":{"type":"array"}},"required":["workers"]}`,
			Idempotent:     true,
			Handler: Typed(func(ctx context.Context, _ Empty) (WorkersListResponse, error) {
				ws, err := e.WorkersList(ctx)
				return WorkersListResponse{Workers: ws}, err
			}),
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

package cron

import (
	"context"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/subjects"
)

// Function ids [Serve] registers.
const (
	FnSchedule   = "cron::schedule"
	FnUnschedule = "cron::unschedule"
	FnList       = "cron::list"
)

// ScheduleResponse is the reply of cron::schedule.
type ScheduleResponse struct {
	ID string `json:"id"`
	// Next is the job's next tick (RFC 3339, UTC).
	Next string `json:"next"`
}

// UnscheduleRequest is the request of cron::unschedule.
type UnscheduleRequest struct {
	ID string `json:"id"`
}

// Validate checks the id.
func (r UnscheduleRequest) Validate() error {
	if err := subjects.ValidateID("id", r.ID); err != nil {
		return invalid(ErrInvalidJob, err)
	}
	return nil
}

// UnscheduleResponse is the reply of cron::unschedule; Removed is false
// when no job had that id.
type UnscheduleResponse struct {
	ID      string `json:"id"`
	Removed bool   `json:"removed"`
}

// Schemas of cron::list.
const (
	listSchema = `{"type":"object","properties":{` +
		`"after":{"type":"string","pattern":"^[A-Za-z0-9_-]{1,128}$","description":"continue a truncated answer: the id of its last job"},` +
		`"limit":{"type":"integer","minimum":0,"maximum":1000,"description":"at most this many jobs; 0 or absent: 100"}}}`
	listRespSchema = `{"type":"object","required":["jobs"],"properties":{` +
		`"jobs":{"type":"array","items":{"type":"object","required":["id","expression","function_id"],"properties":{` +
		`"id":{"type":"string"},"expression":{"type":"string"},"function_id":{"type":"string"},"data":{},` +
		`"timezone":{"type":"string"},"next":{"type":"string","format":"date-time"},` +
		`"data_omitted":{"type":"boolean","description":"the job does not fit the max payload with its data"}}}},` +
		`"truncated":{"type":"boolean","description":"more jobs follow: ask again with after, the last id"}}}`
)

// Serve starts the "cron" worker with cron::schedule {id, expression,
// function_id, data?, timezone?}, cron::unschedule {id} and cron::list
// {after?, limit?} → {jobs, truncated?}. cron::list answers within the
// max payload: at most limit jobs (default [DefaultListLimit]) by id,
// fewer when more would not fit, with truncated set when more follow
// (ask again with after, the last id); a job too large alone is listed
// without its data (data_omitted).
// The functions read and write the jobs bucket, so any number of replicas
// may serve them and every scheduler on the bus follows. s (which may be
// nil) supplies the clock and default location of the "next" times
// reported. ctx bounds the setup only.
func Serve(ctx context.Context, e *engine.Engine, s *Scheduler, opts ...Option) (*engine.Worker, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if s != nil {
		o = s.opts
	}
	next := func(j Job) string {
		x, err := j.compile(o.loc)
		if err != nil {
			return ""
		}
		t := x.Next(o.clock.Now())
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(tickLayout)
	}
	w, err := e.Worker("cron", engine.WithDescription("iii cron triggers: jobs stored in KV, each tick fired once across the cluster"))
	if err != nil {
		return nil, err
	}
	fns := []engine.Function{
		{
			ID:          FnSchedule,
			Description: "Create or replace the cron job id: call function_id with {job_id, tick, tick_ms, data} at every tick of expression, once per tick across the cluster.",
			RequestSchema: `{"type":"object","required":["id","expression","function_id"],"properties":{` +
				`"id":{"type":"string","pattern":"^[A-Za-z0-9_-]{1,128}$"},` +
				`"expression":{"type":"string","description":"5 or 6 fields (leading seconds), @hourly/@daily/@weekly/@monthly/@yearly, or @every <duration>"},` +
				`"function_id":{"type":"string"},"data":{},"timezone":{"type":"string","description":"IANA zone, default UTC"}}}`,
			ResponseSchema: `{"type":"object","required":["id","next"],"properties":{"id":{"type":"string"},"next":{"type":"string","format":"date-time"}}}`,
			Idempotent:     true,
			Handler: engine.Typed(func(ctx context.Context, j Job) (ScheduleResponse, error) {
				if err := Schedule(ctx, e, j); err != nil {
					return ScheduleResponse{}, err
				}
				return ScheduleResponse{ID: j.ID, Next: next(j)}, nil
			}),
		},
		{
			ID:             FnUnschedule,
			Description:    "Delete the cron job id; removed is false when there was none.",
			RequestSchema:  `{"type":"object","required":["id"],"properties":{"id":{"type":"string"}}}`,
			ResponseSchema: `{"type":"object","required":["id","removed"],"properties":{"id":{"type":"string"},"removed":{"type":"boolean"}}}`,
			Idempotent:     true,
			Handler: engine.Typed(func(ctx context.Context, r UnscheduleRequest) (UnscheduleResponse, error) {
				removed, err := Unschedule(ctx, e, r.ID)
				if err != nil {
					return UnscheduleResponse{}, err
				}
				return UnscheduleResponse{ID: r.ID, Removed: removed}, nil
			}),
		},
		{
			ID:             FnList,
			Description:    "List the stored cron jobs by id with their next tick, a page at a time: page on with after, the last id, while truncated.",
			RequestSchema:  listSchema,
			ResponseSchema: listRespSchema,
			Idempotent:     true,
			Handler: func(ctx context.Context, req *engine.Request) (any, error) {
				var r ListRequest
				if err := req.Bind(&r); err != nil {
					return nil, err
				}
				return listPage(ctx, e, r, req.Codec, e.Conn().MaxPayload(), next)
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

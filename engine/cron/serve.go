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

// JobInfo is one entry of cron::list: the job and its next tick.
type JobInfo struct {
	Job
	Next string `json:"next,omitempty"`
}

// ListResponse is the reply of cron::list.
type ListResponse struct {
	Jobs []JobInfo `json:"jobs"`
}

// Serve starts the "cron" worker with cron::schedule {id, expression,
// function_id, data?, timezone?}, cron::unschedule {id} and cron::list {}.
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
			Description:    "List the stored cron jobs with their next tick.",
			RequestSchema:  `{"type":"object"}`,
			ResponseSchema: `{"type":"object","required":["jobs"],"properties":{"jobs":{"type":"array"}}}`,
			Idempotent:     true,
			Handler: engine.Typed(func(ctx context.Context, _ engine.Empty) (ListResponse, error) {
				jobs, err := List(ctx, e)
				if err != nil {
					return ListResponse{}, err
				}
				out := ListResponse{Jobs: make([]JobInfo, 0, len(jobs))}
				for _, j := range jobs {
					out.Jobs = append(out.Jobs, JobInfo{Job: j, Next: next(j)})
				}
				return out, nil
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

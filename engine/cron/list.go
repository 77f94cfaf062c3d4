package cron

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Page sizes of cron::list.
const (
	// DefaultListLimit is the limit of a cron::list request without one.
	DefaultListLimit = 100
	// MaxListLimit is the largest limit a cron::list request may ask for.
	MaxListLimit = 1000
)

// listHeadroom is kept free of the max payload for the reply's headers
// and the fields around the jobs.
const listHeadroom = 1 << 10

// ListRequest is the request of cron::list; every field is optional.
type ListRequest struct {
	// After continues a truncated list: the id of the last job of the
	// previous answer; only jobs whose id sorts after it are listed.
	After string `json:"after,omitempty"`
	// Limit is at most how many jobs one answer lists: 0 to
	// [MaxListLimit], 0 meaning [DefaultListLimit].
	Limit int `json:"limit,omitempty"`
}

// Validate checks the cursor and the limit.
func (r ListRequest) Validate() error {
	if r.After != "" {
		if err := subjects.ValidateID("after", r.After); err != nil {
			return invalid(ErrInvalidJob, err)
		}
	}
	if r.Limit < 0 || r.Limit > MaxListLimit {
		return invalid(ErrInvalidJob, fmt.Errorf("limit %d must be 0..%d", r.Limit, MaxListLimit))
	}
	return nil
}

// JobInfo is one entry of cron::list: the job and its next tick.
type JobInfo struct {
	Job
	Next string `json:"next,omitempty"`
	// DataOmitted says the job's data was left out: the job alone, with
	// it, does not fit the max payload. [List] reads it whole.
	DataOmitted bool `json:"data_omitted,omitempty"`
}

// UnmarshalJSON decodes the job as [Job.UnmarshalJSON] does, and the
// fields around it, which the embedded Job's decoder would drop.
func (ji *JobInfo) UnmarshalJSON(b []byte) error {
	var j Job
	if err := j.UnmarshalJSON(b); err != nil {
		return err
	}
	var extra struct {
		Next        string `json:"next"`
		DataOmitted bool   `json:"data_omitted"`
	}
	if err := json.Unmarshal(b, &extra); err != nil {
		return err
	}
	*ji = JobInfo{Job: j, Next: extra.Next, DataOmitted: extra.DataOmitted}
	return nil
}

// ListResponse is the reply of cron::list: jobs by id.
type ListResponse struct {
	Jobs []JobInfo `json:"jobs"`
	// Truncated says more jobs follow, past the limit or the max payload:
	// ask again with After set to the last job's id.
	Truncated bool `json:"truncated,omitempty"`
}

// listPage answers one cron::list request: the jobs after r.After, by id,
// at most its limit, while their encoding in codec fits maxPayload. The
// first job always goes in, without its data if it does not fit with
// it, so that paging with after moves on. It reads only the jobs it
// lists (and the one after them).
func listPage(ctx context.Context, e *engine.Engine, r ListRequest, codec wire.Codec, maxPayload int64, next func(Job) string) (ListResponse, error) {
	limit := r.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	kv, err := jobsKV(ctx, e)
	if err != nil {
		return ListResponse{}, err
	}
	keys, err := jobKeys(ctx, kv)
	if err != nil {
		return ListResponse{}, err
	}
	out := ListResponse{Jobs: []JobInfo{}}
	room := maxPayload - listHeadroom
	size := func(ji *JobInfo) (int64, error) {
		b, err := codec.Marshal(ji)
		if err != nil {
			return 0, wire.Wrap(wire.CodeInternal, err, "cron job %s does not encode", ji.ID)
		}
		return int64(len(b)) + 1, nil // and a separator
	}
	for _, key := range keys {
		if key <= r.After {
			continue
		}
		j, ok, err := readJob(ctx, e, kv, key)
		if err != nil {
			return ListResponse{}, err
		}
		if !ok {
			continue
		}
		if len(out.Jobs) == limit {
			out.Truncated = true
			break
		}
		ji := JobInfo{Job: j, Next: next(j)}
		sz, err := size(&ji)
		if err != nil {
			return ListResponse{}, err
		}
		if sz > room {
			if len(out.Jobs) > 0 {
				out.Truncated = true
				break
			}
			ji.Data, ji.DataOmitted = nil, true
			if sz, err = size(&ji); err != nil {
				return ListResponse{}, err
			}
		}
		room -= sz
		out.Jobs = append(out.Jobs, ji)
	}
	return out, nil
}

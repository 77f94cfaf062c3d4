package cron

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// JobsBucket is the KV bucket that holds job definitions, one key per job
// id, so every scheduler on the bus runs the same set. The leases live in
// [subjects.CronBucket].
const JobsBucket = subjects.CronJobsBucket

// MaxDataBytes bounds a job's data, JSON-encoded.
const MaxDataBytes = 64 << 10

// Job is one cron trigger: call FunctionID with [Event] at every tick of
// Expression. It is also the request of cron::schedule.
type Job struct {
	// ID names the job: 1-128 characters of [A-Za-z0-9_-].
	ID string `json:"id"`
	// Expression is a cron expression (see [ParseInLocation]).
	Expression string `json:"expression"`
	// FunctionID is the function every tick calls.
	FunctionID string `json:"function_id"`
	// Data is passed to the function as [Event.Data]; any JSON value.
	Data any `json:"data,omitempty"`
	// Timezone is an IANA zone name ("Europe/Paris") the expression's
	// fields are read in; empty means the scheduler's location (UTC by
	// default).
	Timezone string `json:"timezone,omitempty"`
}

// UnmarshalJSON decodes j with exact numbers in Data, as a stored job is
// read: an integer id past 2^53 in a cron::schedule request keeps its
// digits.
func (j *Job) UnmarshalJSON(b []byte) error {
	type plain Job
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	var err error
	if p.Data, err = wire.ExactNumbers(p.Data); err != nil {
		return err
	}
	*j = Job(p)
	return nil
}

// Validate checks the job as cron::schedule does; the error is an
// invalid_payload *wire.Error wrapping [ErrInvalidJob] or
// [ErrInvalidExpression].
func (j Job) Validate() error {
	_, err := j.compile(time.UTC)
	return err
}

// compile validates j and parses its expression in its own zone or def.
func (j Job) compile(def *time.Location) (*Expression, error) {
	if err := subjects.ValidateID("id", j.ID); err != nil {
		return nil, invalid(ErrInvalidJob, err)
	}
	if err := subjects.ValidateFunctionID(j.FunctionID); err != nil {
		return nil, invalid(ErrInvalidJob, err)
	}
	loc := def
	if j.Timezone != "" {
		l, err := loadLocation(j.Timezone)
		if err != nil {
			return nil, invalid(ErrInvalidJob, fmt.Errorf("timezone %q: %v", j.Timezone, err))
		}
		loc = l
	}
	x, err := ParseInLocation(j.Expression, loc)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	if j.Data != nil {
		b, err := json.Marshal(j.Data)
		if err != nil {
			return nil, invalid(ErrInvalidJob, fmt.Errorf("data does not encode as JSON: %v", err))
		}
		if len(b) > MaxDataBytes {
			return nil, invalid(ErrInvalidJob, fmt.Errorf("data of %d bytes exceeds %d", len(b), MaxDataBytes))
		}
	}
	return x, nil
}

// loadLocation loads an IANA zone. "Local" is refused: it differs from node
// to node, and nodes must agree on every tick.
func loadLocation(name string) (*time.Location, error) {
	if name == "Local" || len(name) > 64 || strings.ContainsRune(name, 0) {
		return nil, errors.New("not an IANA zone name")
	}
	return time.LoadLocation(name)
}

func invalid(sentinel, cause error) *wire.Error {
	return wire.Wrap(wire.CodeInvalidPayload, fmt.Errorf("%w: %v", sentinel, cause), "")
}

// Event is the request every tick sends to a job's function.
type Event struct {
	// JobID is the job that fired.
	JobID string `json:"job_id"`
	// Tick is the scheduled time (not the time of the call), RFC 3339 in
	// UTC with milliseconds.
	Tick string `json:"tick"`
	// TickMS is Tick in Unix milliseconds; (JobID, TickMS) is unique per
	// firing, a natural idempotency key.
	TickMS int64 `json:"tick_ms"`
	// Data is the job's data.
	Data any `json:"data,omitempty"`
}

// Time is the tick as a time.Time in UTC.
func (ev Event) Time() time.Time { return time.UnixMilli(ev.TickMS).UTC() }

// JobsBucketConfig is the KV bucket of job definitions.
func JobsBucketConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      JobsBucket,
		Description: "iii cron job definitions, one key per job id",
		History:     1,
		Storage:     jetstream.FileStorage,
	}
}

// LeaseBucketConfig is the KV bucket of tick leases: one key
// "<job id>.<tick unix ms>" per tick, created by the node that fires it and
// expiring on its own (per-key TTL).
func LeaseBucketConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         subjects.CronBucket,
		Description:    "iii cron tick leases: <job id>.<tick unix ms>, first writer fires",
		History:        1,
		Storage:        jetstream.FileStorage,
		LimitMarkerTTL: time.Second,
	}
}

func leaseKey(jobID string, tick time.Time) string {
	return fmt.Sprintf("%s.%d", jobID, tick.UnixMilli())
}

// encodeJob is the stored form of a job: JSON, so `nats kv get` reads it.
func encodeJob(j Job) ([]byte, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return nil, invalid(ErrInvalidJob, err)
	}
	return b, nil
}

// decodeJob reads a stored job. Numbers in Data come back as int64 when
// they are integers (uint64 above int64's range) and float64 otherwise, so
// large ids survive ([Job.UnmarshalJSON]).
func decodeJob(b []byte) (Job, error) {
	var j Job
	if err := json.Unmarshal(b, &j); err != nil {
		return Job{}, err
	}
	return j, nil
}

func jobsKV(ctx context.Context, e *engine.Engine) (jetstream.KeyValue, error) {
	return e.EnsureKV(ctx, JobsBucketConfig())
}

// Schedule stores job (creating or replacing the job of that id); every
// [Scheduler] on the bus picks it up through its KV watch. Errors are
// *wire.Error: invalid_payload for a bad job, unavailable when JetStream
// is not reachable.
func Schedule(ctx context.Context, e *engine.Engine, job Job) error {
	if err := job.Validate(); err != nil {
		return err
	}
	b, err := encodeJob(job)
	if err != nil {
		return err
	}
	kv, err := jobsKV(ctx, e)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, job.ID, b); err != nil {
		return wire.Wrap(wire.CodeUnavailable, err, "store cron job %s", job.ID)
	}
	return nil
}

// Unschedule deletes the job id; removed is false when there was none.
func Unschedule(ctx context.Context, e *engine.Engine, id string) (removed bool, err error) {
	if err := subjects.ValidateID("id", id); err != nil {
		return false, invalid(ErrInvalidJob, err)
	}
	kv, err := jobsKV(ctx, e)
	if err != nil {
		return false, err
	}
	ent, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, wire.Wrap(wire.CodeUnavailable, err, "read cron job %s", id)
	}
	if err := kv.Delete(ctx, id, jetstream.LastRevision(ent.Revision())); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, wire.Wrap(wire.CodeConflict, err, "cron job %s changed while being removed", id)
		}
		return false, wire.Wrap(wire.CodeUnavailable, err, "delete cron job %s", id)
	}
	return true, nil
}

// List returns the stored jobs sorted by id: the set every scheduler runs.
// Entries no scheduler can run (written by hand, not decoding or not
// validating) are skipped. It reads every job; cron::list pages instead.
func List(ctx context.Context, e *engine.Engine) ([]Job, error) {
	kv, err := jobsKV(ctx, e)
	if err != nil {
		return nil, err
	}
	keys, err := jobKeys(ctx, kv)
	if err != nil {
		return nil, err
	}
	jobs := []Job{}
	for _, key := range keys {
		j, ok, err := readJob(ctx, e, kv, key)
		if err != nil {
			return nil, err
		}
		if ok {
			jobs = append(jobs, j)
		}
	}
	return jobs, nil
}

// jobKeys lists the keys of the jobs bucket, sorted.
func jobKeys(ctx context.Context, kv jetstream.KeyValue) ([]string, error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "list cron jobs")
	}
	var keys []string
	for key := range lister.Keys() { // closed after the last key
		keys = append(keys, key)
	}
	if err := ctx.Err(); err != nil {
		return nil, wire.FromNATS(err)
	}
	sort.Strings(keys)
	return keys, nil
}

// readJob reads the job stored under key; ok is false when there is none
// (deleted meanwhile) or no scheduler can run it (logged).
func readJob(ctx context.Context, e *engine.Engine, kv jetstream.KeyValue, key string) (j Job, ok bool, err error) {
	ent, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Job{}, false, nil
	}
	if err != nil {
		return Job{}, false, wire.Wrap(wire.CodeUnavailable, err, "read cron job %s", key)
	}
	j, err = decodeJob(ent.Value())
	if err == nil && j.ID != key {
		err = fmt.Errorf("id %q does not match its key", j.ID)
	}
	if err == nil {
		err = j.Validate()
	}
	if err != nil {
		e.Logger().Warn("cron job entry skipped: bad definition", "key", key, "error", err)
		return Job{}, false, nil
	}
	return j, true, nil
}

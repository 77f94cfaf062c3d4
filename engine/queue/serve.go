package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// WorkerName is the name of the worker [Serve] starts.
const WorkerName = "queue"

// Function ids [Serve] registers.
const (
	FnEnqueue     = "queue::enqueue"
	FnDeadLetters = "queue::dead_letters"
	FnRedrive     = "queue::redrive"
	FnStats       = "queue::stats"
)

// MaxDedupIDLen bounds a dedup id.
const MaxDedupIDLen = 256

// DefaultDeadLettersLimit is the limit of queue::dead_letters without one.
const DefaultDeadLettersLimit = 100

// EnqueueRequest is the payload of queue::enqueue.
type EnqueueRequest struct {
	Queue      string  `json:"queue"`
	FunctionID string  `json:"function_id"`
	Data       Payload `json:"data"`
	DedupID    string  `json:"dedup_id,omitempty"`
}

// Validate checks the names and the dedup id.
func (r EnqueueRequest) Validate() error {
	if err := subjects.ValidateID("queue", r.Queue); err != nil {
		return err
	}
	if err := subjects.ValidateFunctionID(r.FunctionID); err != nil {
		return err
	}
	return ValidateDedupID(r.DedupID)
}

// ValidateDedupID accepts "" (none) or 1..MaxDedupIDLen bytes of UTF-8
// without whitespace or control characters (it becomes a header value):
// queue::enqueue's and topic::publish's dedup_id.
func ValidateDedupID(id string) error {
	if id == "" {
		return nil
	}
	if len(id) > MaxDedupIDLen || !utf8.ValidString(id) {
		return fmt.Errorf("dedup_id must be at most %d bytes of UTF-8", MaxDedupIDLen)
	}
	if strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return errors.New("dedup_id may not contain whitespace or control characters")
	}
	return nil
}

// EnqueueResponse is the reply of queue::enqueue.
type EnqueueResponse struct {
	Queue      string `json:"queue"`
	FunctionID string `json:"function_id"`
}

// StatsRequest is the payload of queue::stats.
type StatsRequest struct {
	Queue string `json:"queue"`
}

// Validate checks the queue name.
func (r StatsRequest) Validate() error { return subjects.ValidateID("queue", r.Queue) }

// DeadLettersRequest is the payload of queue::dead_letters.
type DeadLettersRequest struct {
	Queue string `json:"queue"`
	// Limit is 1..MaxDeadLetters; 0 means DefaultDeadLettersLimit.
	Limit int `json:"limit,omitempty"`
	// After lists only dead letters whose sequence is greater: the
	// sequence of the last one of the previous answer.
	After uint64 `json:"after,omitempty"`
}

// Validate checks the queue name and the limit.
func (r DeadLettersRequest) Validate() error {
	if err := subjects.ValidateID("queue", r.Queue); err != nil {
		return err
	}
	if r.Limit < 0 || r.Limit > MaxDeadLetters {
		return fmt.Errorf("limit %d must be 0..%d", r.Limit, MaxDeadLetters)
	}
	return nil
}

// DeadLettersResponse is the reply of queue::dead_letters.
type DeadLettersResponse struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	// Truncated says the answer stopped short of its limit to fit the max
	// payload: ask again with after set to the last sequence.
	Truncated bool `json:"truncated,omitempty"`
}

// answerHeadroom is kept free of the max payload for the reply's headers
// and the fields around the dead letters.
const answerHeadroom = 1 << 10

// answerFit admits dead letters into one answer while their encoding in
// codec fits the max payload. The first always goes in, without its data
// if it does not fit with it, so that paging with after moves on.
func answerFit(codec wire.Codec, maxPayload int64) func(*DeadLetter) bool {
	room, n := maxPayload-answerHeadroom, 0
	size := func(dl *DeadLetter) int64 {
		b, err := codec.Marshal(dl)
		if err != nil {
			return -1
		}
		return int64(len(b)) + 1 // and a separator
	}
	return func(dl *DeadLetter) bool {
		sz := size(dl)
		if sz < 0 || n == 0 && sz > room {
			dl.Data, dl.DataOmitted = nil, true
			sz = size(dl)
		}
		if n > 0 && sz > room {
			return false
		}
		room -= sz
		n++
		return true
	}
}

// RedriveRequest is the payload of queue::redrive.
type RedriveRequest struct {
	Queue string `json:"queue"`
	// Limit caps how many dead letters move (0: all).
	Limit int `json:"limit,omitempty"`
	// Sequence moves only this dead letter (0: oldest first).
	Sequence uint64 `json:"sequence,omitempty"`
}

// Validate checks the queue name and the limit.
func (r RedriveRequest) Validate() error {
	if err := subjects.ValidateID("queue", r.Queue); err != nil {
		return err
	}
	if r.Limit < 0 {
		return fmt.Errorf("limit %d must not be negative", r.Limit)
	}
	return nil
}

// RedriveResponse is the reply of queue::redrive.
type RedriveResponse struct {
	Queue    string `json:"queue"`
	Redriven int    `json:"redriven"`
	// Skipped counts the dead letters left in place because they would
	// not fit the queue (see [Redrive]); queue::dead_letters lists them.
	Skipped int `json:"skipped,omitempty"`
}

const (
	queueProp = `"queue":{"type":"string","pattern":"^[A-Za-z0-9_-]{1,128}$"}`

	enqueueSchema = `{"type":"object","required":["queue","function_id"],"properties":{` + queueProp +
		`,"function_id":{"type":"string"},"data":{},"dedup_id":{"type":"string","maxLength":256}}}`
	enqueueRespSchema = `{"type":"object","properties":{"queue":{"type":"string"},"function_id":{"type":"string"}}}`
	deadLettersSchema = `{"type":"object","required":["queue"],"properties":{` + queueProp +
		`,"limit":{"type":"integer","minimum":0,"maximum":1000},"after":{"type":"integer","minimum":0}}}`
	deadLettersRespSchema = `{"type":"object","properties":{"dead_letters":{"type":"array","items":{"type":"object","properties":{` +
		`"sequence":{"type":"integer"},"queue":{"type":"string"},"function_id":{"type":"string"},"error_code":{"type":"string"},` +
		`"error_message":{"type":"string"},"deliveries":{"type":"integer"},"redrives":{"type":"integer"},` +
		`"enqueued_at":{"type":"string"},"dead_lettered_at":{"type":"string"},"content_type":{"type":"string"},"data":{},` +
		`"data_omitted":{"type":"boolean"},"body_object":{"type":"string"},"body_size":{"type":"integer"}}}},"truncated":{"type":"boolean"}}}`
	redriveSchema = `{"type":"object","required":["queue"],"properties":{` + queueProp +
		`,"limit":{"type":"integer","minimum":0},"sequence":{"type":"integer","minimum":0}}}`
	redriveRespSchema = `{"type":"object","properties":{"queue":{"type":"string"},"redriven":{"type":"integer"},"skipped":{"type":"integer"}}}`
	statsSchema       = `{"type":"object","required":["queue"],"properties":{` + queueProp + `}}`
	statsRespSchema   = `{"type":"object","properties":{"queue":{"type":"string"},"messages":{"type":"integer"},` +
		`"consumer":{"type":"boolean"},"pending":{"type":"integer"},"ack_pending":{"type":"integer"},` +
		`"redelivered":{"type":"integer"},"waiting":{"type":"integer"},"dead_letters":{"type":"integer"}}}`
)

// Serve starts worker "queue" with the operator functions of durable
// queues:
//
//	queue::enqueue      {queue, function_id, data, dedup_id?} → {queue, function_id}
//	queue::dead_letters {queue, limit?, after?}               → {dead_letters:[DeadLetter], truncated?}
//	queue::redrive      {queue, limit?, sequence?}            → {queue, redriven, skipped?}
//	queue::stats        {queue}                               → Stats
//
// data is any JSON or msgpack value; it is re-encoded in the engine's
// codec, as [engine.Engine.Enqueue] sends it. queue::dead_letters answers
// within the max payload: it stops early with truncated (page on with
// after, the last sequence listed), and a dead letter too large alone is
// listed without its data (data_omitted). A queue::redrive that fails
// partway answers its error with details {redriven, skipped}: what it did
// before the failure, which stays done. ctx bounds the stream setup.
func Serve(ctx context.Context, e *engine.Engine) (*engine.Worker, error) {
	if _, err := e.EnsureStream(ctx, engine.QueueStreamConfig(e.Replicas())); err != nil {
		return nil, err
	}
	if _, err := e.EnsureStream(ctx, engine.DLQStreamConfig(e.Replicas())); err != nil {
		return nil, err
	}
	w, err := e.Worker(WorkerName, engine.WithDescription("durable queues: enqueue, dead letters, redrive, stats"))
	if err != nil {
		return nil, err
	}
	fns := []engine.Function{{
		ID:             FnEnqueue,
		Description:    "Enqueue a call of function_id with data on a durable queue (retries, then dead letter)",
		RequestSchema:  enqueueSchema,
		ResponseSchema: enqueueRespSchema,
		Idempotent:     false,
		Handler: engine.Typed(func(ctx context.Context, r EnqueueRequest) (EnqueueResponse, error) {
			body, err := r.Data.Encode(e.Codec())
			if err != nil {
				return EnqueueResponse{}, wire.Wrap(wire.CodeInvalidPayload, err, "data")
			}
			var opts []engine.EnqueueOption
			if r.DedupID != "" {
				opts = append(opts, engine.WithDedupID(r.DedupID))
			}
			if err := e.Enqueue(ctx, r.Queue, r.FunctionID, engine.Raw(body), opts...); err != nil {
				return EnqueueResponse{}, err
			}
			return EnqueueResponse{Queue: r.Queue, FunctionID: r.FunctionID}, nil
		}),
	}, {
		ID:             FnDeadLetters,
		Description:    "List the dead letters of a queue, oldest first",
		RequestSchema:  deadLettersSchema,
		ResponseSchema: deadLettersRespSchema,
		Idempotent:     true,
		Handler: func(ctx context.Context, req *engine.Request) (any, error) {
			var r DeadLettersRequest
			if err := req.Bind(&r); err != nil {
				return nil, err
			}
			limit := r.Limit
			if limit == 0 {
				limit = DefaultDeadLettersLimit
			}
			subj, _ := subjects.DLQSubject(r.Queue) // validated
			dls, truncated, err := listDeadLetters(ctx, e, r.Queue, subj, r.After, limit, answerFit(req.Codec, e.Conn().MaxPayload()))
			if err != nil {
				return nil, err
			}
			return DeadLettersResponse{DeadLetters: dls, Truncated: truncated}, nil
		},
	}, {
		ID:             FnRedrive,
		Description:    "Move the dead letters of a queue back onto it",
		RequestSchema:  redriveSchema,
		ResponseSchema: redriveRespSchema,
		Idempotent:     true,
		Handler: engine.Typed(func(ctx context.Context, r RedriveRequest) (RedriveResponse, error) {
			var opts []RedriveOption
			if r.Limit > 0 {
				opts = append(opts, WithRedriveLimit(r.Limit))
			}
			if r.Sequence > 0 {
				opts = append(opts, WithRedriveSequence(r.Sequence))
			}
			res, err := Redrive(ctx, e, r.Queue, opts...)
			if err != nil {
				// The dead letters moved before the failure stay moved:
				// say how many, or a caller cannot tell what is left.
				we := wire.From(err)
				details := map[string]any{}
				for k, v := range we.Details {
					details[k] = v
				}
				details["redriven"], details["skipped"] = res.Redriven, res.Skipped
				return RedriveResponse{}, we.WithDetails(details)
			}
			return RedriveResponse{Queue: r.Queue, Redriven: res.Redriven, Skipped: res.Skipped}, nil
		}),
	}, {
		ID:             FnStats,
		Description:    "Messages, pending, ack pending, redelivered and dead letters of a queue",
		RequestSchema:  statsSchema,
		ResponseSchema: statsRespSchema,
		Idempotent:     true,
		Handler: engine.Typed(func(ctx context.Context, r StatsRequest) (Stats, error) {
			return Inspect(ctx, e, r.Queue)
		}),
	}}
	for _, fn := range fns {
		if err := w.Register(fn); err != nil {
			_ = w.Close(ctx)
			return nil, err
		}
	}
	return w, nil
}

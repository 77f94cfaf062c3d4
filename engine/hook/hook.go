package hook

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/subjects"
)

// MergeRule says how [PublishCollect] folds the replies into
// [Result].Merged. Replies are folded in arrival order.
type MergeRule string

// The merge rules.
const (
	// FirstBlockWins: merged is the first reply whose "block" is JSON true;
	// when no reply blocks, merged is the [FieldMerge] of all replies, so a
	// non-blocking hook's rewrite (e.g. of "args") still comes through.
	FirstBlockWins MergeRule = "first_block_wins"
	// FieldMerge: a shallow merge of all replies; a later reply's key
	// overrides an earlier one's, unless its value is null: null is no
	// answer ({"result":null} decodes as an [AfterReply] that keeps the
	// result), so it does not undo an earlier reply's value.
	FieldMerge MergeRule = "field_merge"
	// PipelineLastWins: merged is the last reply.
	PipelineLastWins MergeRule = "pipeline_last_wins"
)

// Valid reports whether r is one of the three merge rules.
func (r MergeRule) Valid() bool {
	switch r {
	case FirstBlockWins, FieldMerge, PipelineLastWins:
		return true
	}
	return false
}

// Limits and defaults of a [Request].
const (
	// DefaultTimeout is the collect deadline of a request with timeout_ms 0.
	DefaultTimeout = time.Second
	// MaxTimeout is the largest timeout_ms a request may ask for.
	MaxTimeout = 60 * time.Second
	// DefaultQuiescence ends a collect this long after the last reply when
	// the request's quiescence_ms is 0: hook subscribers answer at once, so
	// a short silence means they are done.
	DefaultQuiescence = 20 * time.Millisecond
	// MaxExpectedReplies is the largest expected_replies a request may ask
	// for.
	MaxExpectedReplies = 1000
	// MaxReplies bounds the messages one collect reads, invalid ones
	// included: each restarts the quiescence, so without it a subscriber
	// that floods replies kept a round going to its timeout and its
	// memory growing. It is MaxExpectedReplies, the most a caller may
	// wait for, so a round that expects them all still ends normally.
	MaxReplies = MaxExpectedReplies
	// MaxReplyBytes bounds the wire size (headers and body) of the
	// messages one collect holds — counted as each arrives, so those
	// queued and not yet read count too: 8 MiB, the largest max payload
	// nats-server recommends (it warns above it). It holds 8 replies of
	// the default max payload (1 MiB) or 1,000 of 8 KiB, far more than
	// hooks answer (a verdict, rewritten arguments, a redacted result),
	// and bounds what one round decodes and keeps.
	MaxReplyBytes = 8 << 20
)

// Request is the input of hooks::publish_collect (SPEC §4).
type Request struct {
	// Topic is a function-id-like hook name ("agent::before_function_call");
	// it is published on [subjects.HookSubject] of it.
	Topic string `json:"topic"`
	// Payload is published as JSON; any value that encodes as JSON will do.
	Payload any `json:"payload"`
	// MergeRule is required: one of [FirstBlockWins], [FieldMerge],
	// [PipelineLastWins].
	MergeRule MergeRule `json:"merge_rule"`
	// TimeoutMs bounds the collect (0..60000; 0 means [DefaultTimeout]).
	TimeoutMs int `json:"timeout_ms,omitempty"`
	// ExpectedReplies ends the collect once that many replies arrived,
	// counting those that do not decode (0..1000; 0 means no such limit).
	ExpectedReplies int `json:"expected_replies,omitempty"`
	// QuiescenceMs ends the collect when no reply arrived for that long
	// after the last one (0..timeout; 0 means [DefaultQuiescence]).
	QuiescenceMs int `json:"quiescence_ms,omitempty"`
}

// Validate checks the request; every error wraps [ErrInvalidRequest].
func (r Request) Validate() error {
	_, err := r.check()
	return err
}

// check validates r and returns its hook subject.
func (r Request) check() (string, error) {
	subj, err := subjects.HookSubject(r.Topic)
	if err != nil {
		return "", fmt.Errorf("%w: topic: %w", ErrInvalidRequest, err)
	}
	if !r.MergeRule.Valid() {
		return "", fmt.Errorf("%w: merge_rule %q is not one of %s, %s, %s", ErrInvalidRequest, r.MergeRule, FirstBlockWins, FieldMerge, PipelineLastWins)
	}
	if r.TimeoutMs < 0 || r.TimeoutMs > int(MaxTimeout/time.Millisecond) {
		return "", fmt.Errorf("%w: timeout_ms %d is not in 0..%d", ErrInvalidRequest, r.TimeoutMs, MaxTimeout/time.Millisecond)
	}
	if r.ExpectedReplies < 0 || r.ExpectedReplies > MaxExpectedReplies {
		return "", fmt.Errorf("%w: expected_replies %d is not in 0..%d", ErrInvalidRequest, r.ExpectedReplies, MaxExpectedReplies)
	}
	if max := r.timeout() / time.Millisecond; r.QuiescenceMs < 0 || int64(r.QuiescenceMs) > int64(max) {
		return "", fmt.Errorf("%w: quiescence_ms %d is not in 0..%d (the timeout)", ErrInvalidRequest, r.QuiescenceMs, max)
	}
	return subj, nil
}

// timeout is the effective collect timeout of a valid request.
func (r Request) timeout() time.Duration {
	if r.TimeoutMs == 0 {
		return DefaultTimeout
	}
	return time.Duration(r.TimeoutMs) * time.Millisecond
}

// quiescence is the effective quiescence of a valid request.
func (r Request) quiescence() time.Duration {
	if r.QuiescenceMs == 0 {
		return DefaultQuiescence
	}
	return time.Duration(r.QuiescenceMs) * time.Millisecond
}

// Result is the output of hooks::publish_collect (SPEC §4).
type Result struct {
	// Replies holds every decoded reply in arrival order; a reply that is
	// not a JSON object is kept as {"value": <it>}. Never nil.
	Replies []map[string]any `json:"replies"`
	// Merged is the replies folded by the request's merge rule; {} when
	// there is none. Never nil. It shares values (not the top-level map)
	// with Replies.
	Merged map[string]any `json:"merged"`
	// PublishFailed says the hook never reached the bus; [PublishCollect]
	// then also returns an error wrapping [ErrPublishFailed].
	PublishFailed bool `json:"publish_failed,omitempty"`
	// Invalid counts replies that were skipped: bodies that do not decode
	// in their Content-Type, NATS service error replies and status
	// messages other than no-responders.
	Invalid int `json:"invalid,omitempty"`
	// Dropped counts replies the client dropped because they arrived
	// faster than its handler took them (a slow consumer); they are lost,
	// and one dropped while the round was open sets Overflow: it may have
	// been a block.
	Dropped int `json:"dropped,omitempty"`
	// Overflow says the round ended at [MaxReplies] or [MaxReplyBytes]
	// with replies still coming, or lost one (Dropped): the others were
	// not read, so Merged
	// may miss one that mattered (a block). A caller guarding a function
	// call must deny it, as for PublishFailed.
	Overflow bool `json:"overflow,omitempty"`
	// Omitted counts the newest replies that hooks::publish_collect left
	// out of Replies because its answer would not fit the server's max
	// payload; Merged still folds them. [PublishCollect] never sets it.
	Omitted int `json:"omitted,omitempty"`
}

// Bind decodes Merged into v (a pointer, e.g. to [BeforeReply] or
// [AfterReply]) through JSON. A merged reply of the wrong shape ("block":
// "yes") is an error wrapping [ErrInvalidReply]; a caller guarding a
// function call should treat it as a block.
func (r Result) Bind(v any) error {
	b, err := json.Marshal(r.Merged)
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		return fmt.Errorf("%w: merged reply does not decode into %T: %w", ErrInvalidReply, v, err)
	}
	return nil
}

package traces

import (
	"math"
	"strings"

	"github.com/iii-on-nats/iii/engine"
)

// Function ids the worker serves.
const (
	GroupByFunction = "engine::traces::group_by"
	TreeFunction    = "engine::traces::tree"
)

// Limits of engine::traces::group_by.
const (
	// DefaultGroupLimit is the number of groups answered without a limit.
	DefaultGroupLimit = 100
	// MaxGroupLimit bounds the limit of one call.
	MaxGroupLimit = 1000
	// MaxGroupTraceIDs bounds the trace ids listed per group (the newest);
	// trace_count has them all.
	MaxGroupTraceIDs = 100
	// MaxTreeSpans bounds the spans of one engine::traces::tree answer (the
	// earliest by start); span_count has them all.
	MaxTreeSpans = 5000
	// MaxTreeDepth bounds the levels of one engine::traces::tree answer
	// (a root is level 1): the children of a span this deep are listed
	// among the roots, flagged detached, so that the answer nests at most
	// 2×MaxTreeDepth+[MaxStoredSpanDepth] levels, within what decoders
	// take (msgpack replies 256, Python's JSON about 1,000).
	MaxTreeDepth = 100
	// MaxSinceMs bounds since_ms: the last millisecond whose nanoseconds
	// fit an int64 (in 2262).
	MaxSinceMs = math.MaxInt64 / 1_000_000
)

// GroupAttributes are the span attributes engine::traces::group_by groups
// by.
var GroupAttributes = [...]string{engine.AttrSessionID, engine.AttrMessageID, engine.AttrFunctionID}

// attrIndex is the index of attr in GroupAttributes, or -1.
func attrIndex(attr string) int {
	for i, a := range GroupAttributes {
		if a == attr {
			return i
		}
	}
	return -1
}

// GroupByRequest is the payload of engine::traces::group_by.
type GroupByRequest struct {
	// Attribute is one of [GroupAttributes].
	Attribute string `json:"attribute"`
	// SinceMs keeps only spans that ended at or after this Unix time in
	// milliseconds (0: all).
	SinceMs int64 `json:"since_ms,omitempty"`
	// Limit bounds the groups (0: [DefaultGroupLimit]; at most
	// [MaxGroupLimit]).
	Limit int `json:"limit,omitempty"`
}

// Validate checks the attribute and the bounds.
func (r *GroupByRequest) Validate() error {
	if attrIndex(r.Attribute) < 0 {
		return invalid("attribute %q: want one of %s", r.Attribute, strings.Join(GroupAttributes[:], ", "))
	}
	if r.SinceMs < 0 || r.SinceMs > MaxSinceMs {
		return invalid("since_ms %d must be in [0, %d]", r.SinceMs, MaxSinceMs)
	}
	if r.Limit < 0 || r.Limit > MaxGroupLimit {
		return invalid("limit %d must be in [0, %d]", r.Limit, MaxGroupLimit)
	}
	return nil
}

// Group is the spans that share one value of the grouped attribute.
type Group struct {
	Value string `json:"value"`
	// TraceIDs are the group's traces, newest (by last span end) first, at
	// most [MaxGroupTraceIDs].
	TraceIDs []string `json:"trace_ids"`
	// TraceCount is the number of distinct traces in the group.
	TraceCount int `json:"trace_count"`
	SpanCount  int `json:"span_count"`
	// FirstSeenMs is the earliest span start, LastSeenMs the latest span
	// end, DurationMs the time between them.
	FirstSeenMs int64 `json:"first_seen_ms"`
	LastSeenMs  int64 `json:"last_seen_ms"`
	DurationMs  int64 `json:"duration_ms"`
	// ErrorCount is the number of spans with status error.
	ErrorCount int `json:"error_count"`
}

// GroupByResponse is the answer of engine::traces::group_by: groups newest
// (by last_seen_ms) first.
type GroupByResponse struct {
	Groups []Group `json:"groups"`
	// Truncated is true when more groups matched than the limit, or than
	// fit in one message (about 900 KiB of JSON).
	Truncated bool `json:"truncated,omitempty"`
}

// TreeRequest is the payload of engine::traces::tree.
type TreeRequest struct {
	// TraceID is 32 hex digits (upper case is accepted).
	TraceID string `json:"trace_id"`
}

// Validate checks (and lower-cases) the trace id.
func (r *TreeRequest) Validate() error {
	id := strings.ToLower(r.TraceID)
	if !ValidTraceID(id) {
		return invalid("trace_id %q is not 32 hex digits (and not all zero)", r.TraceID)
	}
	r.TraceID = id
	return nil
}

// TreeNode is a span with its children (by start time).
type TreeNode struct {
	Span
	// MissingParent is true for a span whose parent_span_id names a span
	// the store does not hold (not exported, not yet arrived, or evicted):
	// such a span is listed among the roots.
	MissingParent bool `json:"missing_parent,omitempty"`
	// Detached is true for a span [MaxTreeDepth] levels below a root,
	// listed among the roots (its parent is in the tree) to bound the
	// answer's nesting.
	Detached bool        `json:"detached,omitempty"`
	Children []*TreeNode `json:"children,omitempty"`
}

// TreeResponse is the answer of engine::traces::tree.
type TreeResponse struct {
	TraceID string `json:"trace_id"`
	// Spans are the roots, by start time: spans without a parent, spans
	// whose parent is not in the store (flagged missing_parent) and spans
	// too deep below a root (flagged detached).
	Spans []*TreeNode `json:"spans"`
	// SpanCount is the number of spans the store holds for the trace.
	SpanCount  int `json:"span_count"`
	ErrorCount int `json:"error_count"`
	// StartMs is the earliest span start, DurationMs the time to the
	// latest span end.
	StartMs    int64 `json:"start_ms"`
	DurationMs int64 `json:"duration_ms"`
	// Truncated is true when the trace has more than [MaxTreeSpans] spans,
	// or more than fit one answer: the tree holds the earliest ones.
	Truncated bool `json:"truncated,omitempty"`
}

package traces

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Span statuses ([Span.Status]).
const (
	StatusUnset = "unset"
	StatusOK    = "ok"
	StatusError = "error"
)

// MaxSpanBytes bounds one encoded span on the stream; [DecodeSpan] refuses
// larger input.
const MaxSpanBytes = 1 << 20

// MaxStoredSpanBytes bounds the encoding of a span a [Store] holds: a
// larger one is held trimmed ([Span.Trim]), so that one tree answer holds
// many spans and any span fits an answer.
const MaxStoredSpanBytes = 64 << 10

// MaxStoredSpanDepth bounds the nesting of a span's encoding a [Store]
// holds (the span object is level 1; an SDK span's events nest 5 deep): a
// deeper one, which only a hand-made publisher sends, is held trimmed
// ([Span.Trim]), so that a tree answer nests no deeper than JSON decoders
// take ([MaxTreeDepth]).
const MaxStoredSpanDepth = 16

// maxTrimmedText bounds each text a trimmed span keeps.
const maxTrimmedText = 1 << 10

// AttrTrimmedBytes is the attribute of a span trimmed by a [Store]: the
// size in bytes of its encoding before.
const AttrTrimmedBytes = "iii.traces.trimmed_bytes"

// Span is the compact JSON form of one ended span, as published on
// [StreamName] under [SpanSubject] and served by engine::traces::tree.
// Ids are lower-case hex (32 digits for a trace, 16 for a span); times are
// Unix nanoseconds.
type Span struct {
	TraceID       string         `json:"trace_id"`
	SpanID        string         `json:"span_id"`
	ParentSpanID  string         `json:"parent_span_id,omitempty"`
	Name          string         `json:"name"`
	Kind          string         `json:"kind"`
	StartNs       int64          `json:"start_ns"`
	EndNs         int64          `json:"end_ns"`
	DurationMs    float64        `json:"duration_ms"`
	Status        string         `json:"status"`
	StatusMessage string         `json:"status_message,omitempty"`
	Attributes    map[string]any `json:"attributes,omitempty"`
	Links         []Link         `json:"links,omitempty"`
	Events        []Event        `json:"events,omitempty"`
	Resource      map[string]any `json:"resource,omitempty"`
}

// Link is a span link: a causal reference to a span of (usually) another
// trace, such as the enqueue that a queued call came from.
type Link struct {
	TraceID    string         `json:"trace_id"`
	SpanID     string         `json:"span_id"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// Event is a timed annotation of a span (an exception, a retry).
type Event struct {
	Name       string         `json:"name"`
	TimeNs     int64          `json:"time_ns"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// StartMs is the span's start in Unix milliseconds.
func (s *Span) StartMs() int64 { return s.StartNs / 1e6 }

// EndMs is the span's end in Unix milliseconds.
func (s *Span) EndMs() int64 { return s.EndNs / 1e6 }

// StringAttribute returns the attribute key when it is a non-empty string.
func (s *Span) StringAttribute(key string) (string, bool) {
	v, ok := s.Attributes[key].(string)
	return v, ok && v != ""
}

// FromReadOnlySpan converts an SDK span into its compact form.
func FromReadOnlySpan(ro sdktrace.ReadOnlySpan) Span {
	return fromReadOnly(ro, resourceMap(ro.Resource()))
}

// fromReadOnly converts ro, sharing res (read only) as its resource.
func fromReadOnly(ro sdktrace.ReadOnlySpan, res map[string]any) Span {
	sc := ro.SpanContext()
	start, end := ro.StartTime().UnixNano(), ro.EndTime().UnixNano()
	sp := Span{
		TraceID:    sc.TraceID().String(),
		SpanID:     sc.SpanID().String(),
		Name:       ro.Name(),
		Kind:       ro.SpanKind().String(),
		StartNs:    start,
		EndNs:      end,
		DurationMs: float64(end-start) / 1e6,
		Attributes: attrMap(ro.Attributes()),
		Resource:   res,
	}
	if p := ro.Parent(); p.SpanID().IsValid() {
		sp.ParentSpanID = p.SpanID().String()
	}
	st := ro.Status()
	switch st.Code {
	case codes.Error:
		sp.Status, sp.StatusMessage = StatusError, st.Description
	case codes.Ok:
		sp.Status = StatusOK
	default:
		sp.Status = StatusUnset
	}
	if links := ro.Links(); len(links) > 0 {
		sp.Links = make([]Link, len(links))
		for i, l := range links {
			sp.Links[i] = Link{TraceID: l.SpanContext.TraceID().String(), SpanID: l.SpanContext.SpanID().String(), Attributes: attrMap(l.Attributes)}
		}
	}
	if evs := ro.Events(); len(evs) > 0 {
		sp.Events = make([]Event, len(evs))
		for i, ev := range evs {
			sp.Events[i] = Event{Name: ev.Name, TimeNs: ev.Time.UnixNano(), Attributes: attrMap(ev.Attributes)}
		}
	}
	return sp
}

// attrMap turns attributes into a JSON-ready map; nil when there are none.
func attrMap(kvs []attribute.KeyValue) map[string]any {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = jsonValue(kv.Value)
	}
	return m
}

// jsonValue is v as JSON takes it: a float that is not finite becomes
// the string OTLP's JSON writes for it ("NaN", "Infinity",
// "-Infinity"). JSON has no number for it, and one such attribute
// failed the span's whole encoding: the span was lost.
func jsonValue(v attribute.Value) any {
	switch v.Type() {
	case attribute.FLOAT64:
		if f := v.AsFloat64(); !finite(f) {
			return nonFinite(f)
		}
	case attribute.FLOAT64SLICE:
		fs := v.AsFloat64Slice()
		if !slices.ContainsFunc(fs, func(f float64) bool { return !finite(f) }) {
			return fs
		}
		out := make([]any, len(fs))
		for i, f := range fs {
			if out[i] = f; !finite(f) {
				out[i] = nonFinite(f)
			}
		}
		return out
	}
	return v.AsInterface()
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// nonFinite is the name of f, NaN or an infinity.
func nonFinite(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	default:
		return "NaN"
	}
}

// resourceMap is the resource's attributes (service.name, ...).
func resourceMap(r *sdkresource.Resource) map[string]any {
	if r == nil {
		return nil
	}
	return attrMap(r.Attributes())
}

// Trim returns the span without its events, links, resource and
// attributes other than [GroupAttributes], its texts cut to 1 KiB (a
// group attribute longer than that is dropped rather than cut, so that it
// never joins another group), and the attribute [AttrTrimmedBytes] set to
// size, the span's encoded size.
func (s Span) Trim(size int) Span {
	t := Span{
		TraceID: s.TraceID, SpanID: s.SpanID, ParentSpanID: s.ParentSpanID,
		Name: cut(s.Name, maxTrimmedText), Kind: cut(s.Kind, maxTrimmedText),
		StartNs: s.StartNs, EndNs: s.EndNs, DurationMs: s.DurationMs,
		Status: s.Status, StatusMessage: cut(s.StatusMessage, maxTrimmedText),
		Attributes: map[string]any{AttrTrimmedBytes: size},
	}
	for _, a := range GroupAttributes {
		if v, ok := s.StringAttribute(a); ok && len(v) <= maxTrimmedText {
			t.Attributes[a] = v
		}
	}
	return t
}

// cut shortens s to at most n bytes, on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// jsonDepth is the deepest nesting of objects and arrays in data, valid
// JSON.
func jsonDepth(data []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// unmarshalSpan is json.Unmarshal of data into sp, except that the
// numbers of its attributes, links, events and resource are exact: an
// integer is an int64 (or a uint64 above its range), any other number a
// float64. json.Unmarshal makes them all float64s, which rounded an
// integer attribute past 2^53 (an int64 id) when the store took it.
func unmarshalSpan(data []byte, sp *Span) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(sp); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("invalid data after the span at offset %d", dec.InputOffset())
	}
	maps := []map[string]any{sp.Attributes, sp.Resource}
	for _, l := range sp.Links {
		maps = append(maps, l.Attributes)
	}
	for _, ev := range sp.Events {
		maps = append(maps, ev.Attributes)
	}
	for _, m := range maps {
		if _, err := wire.ExactNumbers(m); err != nil {
			return err
		}
	}
	return nil
}

// DecodeSpan decodes and validates one span as published on the stream.
// Every failure wraps [ErrInvalidSpan].
func DecodeSpan(data []byte) (Span, error) {
	if len(data) > MaxSpanBytes {
		return Span{}, fmt.Errorf("%w: %d bytes (at most %d)", ErrInvalidSpan, len(data), MaxSpanBytes)
	}
	var sp Span
	if err := unmarshalSpan(data, &sp); err != nil {
		return Span{}, fmt.Errorf("%w: %w", ErrInvalidSpan, err)
	}
	if err := sp.Validate(); err != nil {
		return Span{}, err
	}
	return sp, nil
}

// DecodeSpans reads one stream message: a JSON array of spans of one
// trace (what the exporter publishes) or a single span object (any other
// publisher's). Invalid spans are skipped and counted in invalid; a
// message that is not JSON at all is an error.
func DecodeSpans(data []byte) (spans []Span, invalid int, err error) {
	if len(data) > MaxSpanBytes {
		return nil, 0, fmt.Errorf("%w: %d bytes (at most %d)", ErrInvalidSpan, len(data), MaxSpanBytes)
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '[' {
		sp, err := DecodeSpan(data)
		if err != nil {
			return nil, 0, err
		}
		return []Span{sp}, 0, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrInvalidSpan, err)
	}
	spans = make([]Span, 0, len(raw))
	for _, r := range raw {
		sp, err := DecodeSpan(r)
		if err != nil {
			invalid++
			continue
		}
		spans = append(spans, sp)
	}
	return spans, invalid, nil
}

// Validate checks the ids, times and status, and sets DurationMs from the
// times (a publisher's own figure is not trusted). Every failure wraps
// [ErrInvalidSpan].
func (s *Span) Validate() error {
	if !ValidTraceID(s.TraceID) {
		return fmt.Errorf("%w: trace_id %q is not 32 lower-case hex digits", ErrInvalidSpan, s.TraceID)
	}
	if !validSpanID(s.SpanID) {
		return fmt.Errorf("%w: span_id %q is not 16 lower-case hex digits", ErrInvalidSpan, s.SpanID)
	}
	if s.ParentSpanID != "" && !validSpanID(s.ParentSpanID) {
		return fmt.Errorf("%w: parent_span_id %q is not 16 lower-case hex digits", ErrInvalidSpan, s.ParentSpanID)
	}
	if s.StartNs < 0 || s.EndNs < s.StartNs {
		return fmt.Errorf("%w: start_ns %d, end_ns %d", ErrInvalidSpan, s.StartNs, s.EndNs)
	}
	s.DurationMs = float64(s.EndNs-s.StartNs) / 1e6
	switch s.Status {
	case StatusUnset, StatusOK, StatusError:
	case "":
		s.Status = StatusUnset
	default:
		return fmt.Errorf("%w: status %q (want ok, error or unset)", ErrInvalidSpan, s.Status)
	}
	for _, l := range s.Links {
		if !ValidTraceID(l.TraceID) || !validSpanID(l.SpanID) {
			return fmt.Errorf("%w: link %s/%s", ErrInvalidSpan, l.TraceID, l.SpanID)
		}
	}
	return nil
}

// ValidTraceID reports whether id is 32 lower-case hex digits, not all
// zero (a valid W3C trace id as OpenTelemetry prints it).
func ValidTraceID(id string) bool { return validHexID(id, 32) }

func validSpanID(id string) bool { return validHexID(id, 16) }

func validHexID(id string, n int) bool {
	if len(id) != n {
		return false
	}
	zero := true
	for i := 0; i < n; i++ {
		c := id[i]
		switch {
		case c == '0':
		case '1' <= c && c <= '9', 'a' <= c && c <= 'f':
			zero = false
		default:
			return false
		}
	}
	return !zero
}

// SpanSubject is the subject a span of traceID is published on
// ("iii.spans.<trace id>"). traceID must be valid ([ValidTraceID]).
func SpanSubject(traceID string) string { return SubjectPrefix + traceID }

package channel

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Headers of channel messages. Every frame on the data subject carries
// [HeaderSeq] and [HeaderKind] (and Content-Type); every control message on
// the ack subject carries [HeaderKind] and, for credit, [HeaderCredit].
const (
	// HeaderSeq is a frame's sequence number: decimal, no sign, no leading
	// zero, 1 for the first frame and +1 for each frame after it, terminal
	// frames included.
	HeaderSeq = "Iii-Ch-Seq"
	// HeaderKind is the message's [Kind] ("data", "end", "error" on the data
	// subject; "credit", "cancel" on the ack subject; "ping" on the ping
	// subject; "keepalive" in answer to a reader's liveness probe).
	HeaderKind = "Iii-Ch-Kind"
	// HeaderCredit is the highest sequence number the writer may send, in a
	// credit message (decimal, like [HeaderSeq]). Credit is cumulative, so a
	// lost or repeated credit message does no harm.
	HeaderCredit = "Iii-Ch-Credit"
	// HeaderCreditBytes is the byte credit of a credit message (decimal,
	// like [HeaderSeq]; optional): a data frame may be sent only while the
	// payload bytes of all the data frames sent before it are below it.
	// Cumulative too. A writer that never saw one has no byte limit.
	HeaderCreditBytes = "Iii-Ch-Credit-Bytes"
)

// maxSeqLen is the length of the largest uint64 in decimal.
const maxSeqLen = 20

// Kind is the kind of a channel message.
type Kind uint8

// The kinds. Data, end and error are frames (writer → reader); credit and
// cancel are control messages (reader → writer); ping is a writer's credit
// request (writer → reader); keepalive is a busy writer's answer to the
// reader's liveness probe (writer → reader).
const (
	// KindData carries one payload.
	KindData Kind = iota + 1
	// KindEnd ends the stream cleanly; its body is empty.
	KindEnd
	// KindError ends the stream with the writer's error: the wire error
	// envelope in the body and the NATS services error headers.
	KindError
	// KindCredit grants the writer frames up to [HeaderCredit].
	KindCredit
	// KindCancel tells the writer the reader is gone.
	KindCancel
	// KindPing asks the reader for its current credit.
	KindPing
	// KindKeepAlive tells the reader that the writer is alive and its
	// owner at work on the next frame ([Writer.Busy]): the reader's idle
	// timeout starts again. It is no frame and uses no sequence number.
	KindKeepAlive
)

var kindNames = [...]string{KindData: "data", KindEnd: "end", KindError: "error", KindCredit: "credit", KindCancel: "cancel", KindPing: "ping", KindKeepAlive: "keepalive"}

// String is the kind's name on the wire.
func (k Kind) String() string {
	if k >= KindData && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

func parseKind(s string) (Kind, error) {
	for k := KindData; int(k) < len(kindNames); k++ {
		if kindNames[k] == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown kind %q", truncate(s))
}

// Frame is one frame of a channel, as [Reader.Next] returns it.
type Frame struct {
	// Seq is the frame's sequence number, from 1.
	Seq uint64
	// Kind is KindData for every frame Next returns (terminal frames become
	// errors).
	Kind Kind
	// Data is the encoded payload; it belongs to the caller.
	Data []byte
	// Codec is the payload's codec, from the frame's Content-Type.
	Codec wire.Codec
}

// Decode decodes the frame's payload into v. A payload that does not decode
// is an invalid_payload wire error.
func (f Frame) Decode(v any) error {
	c := f.Codec
	if c == nil {
		c = wire.JSON
	}
	if err := c.Unmarshal(f.Data, v); err != nil {
		return wire.Wrap(wire.CodeInvalidPayload, nil, "channel frame %d does not decode as %s: %v", f.Seq, c.ContentType(), err)
	}
	return nil
}

var errMissing = errors.New("missing")

// headerValue returns the single value of key: matched exactly, else
// case-insensitively (non-Go clients may send lower-case names). A missing
// key, several values or several spellings are errors.
func headerValue(h nats.Header, key string) (string, error) {
	v, ok, err := lookupHeader(h, key)
	if err == nil && !ok {
		err = fmt.Errorf("%s: %w", key, errMissing)
	}
	return v, err
}

// lookupHeader is headerValue for an optional key: ok is false when it is
// missing.
func lookupHeader(h nats.Header, key string) (val string, ok bool, err error) {
	if vs, ok := h[key]; ok {
		if len(vs) != 1 {
			return "", false, fmt.Errorf("%s has %d values", key, len(vs))
		}
		return vs[0], true, nil
	}
	for k, vs := range h {
		if !strings.EqualFold(k, key) {
			continue
		}
		if ok || len(vs) != 1 {
			return "", false, fmt.Errorf("%s is ambiguous", key)
		}
		ok, val = true, vs[0]
	}
	return val, ok, nil
}

// parseSeq parses a sequence number or credit in canonical decimal: 1 to
// 2^64-1, digits only, no leading zero.
func parseSeq(s string) (uint64, error) {
	if s == "" || len(s) > maxSeqLen {
		return 0, fmt.Errorf("sequence %q is not 1 to %d digits", truncate(s), maxSeqLen)
	}
	if s[0] == '0' {
		return 0, fmt.Errorf("sequence %q is zero or has a leading zero", truncate(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("sequence %q is not decimal", truncate(s))
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sequence %q is out of range", truncate(s))
	}
	return n, nil
}

// parseFrame reads the headers of a frame on the data subject.
func parseFrame(h nats.Header) (seq uint64, kind Kind, err error) {
	ks, err := headerValue(h, HeaderKind)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrInvalidFrame, err)
	}
	kind, err = parseKind(ks)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrInvalidFrame, err)
	}
	if kind != KindData && kind != KindEnd && kind != KindError {
		return 0, 0, fmt.Errorf("%w: %s is not a frame kind", ErrInvalidFrame, kind)
	}
	ss, err := headerValue(h, HeaderSeq)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrInvalidFrame, err)
	}
	seq, err = parseSeq(ss)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrInvalidFrame, err)
	}
	return seq, kind, nil
}

// errInvalidControl marks a control message that does not parse; the writer
// ignores such messages.
var errInvalidControl = errors.New("channel: invalid control message")

// parseControl reads the headers of a message on the ack subject. A credit
// message without [HeaderCreditBytes] has bytes 0: no byte credit.
func parseControl(h nats.Header) (kind Kind, credit, bytes uint64, err error) {
	ks, err := headerValue(h, HeaderKind)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%w: %v", errInvalidControl, err)
	}
	kind, err = parseKind(ks)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%w: %v", errInvalidControl, err)
	}
	switch kind {
	case KindCancel:
		return kind, 0, 0, nil
	case KindCredit:
		cs, err := headerValue(h, HeaderCredit)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%w: %v", errInvalidControl, err)
		}
		credit, err = parseSeq(cs)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%w: %v", errInvalidControl, err)
		}
		bs, ok, err := lookupHeader(h, HeaderCreditBytes)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%w: %v", errInvalidControl, err)
		}
		if !ok {
			return kind, credit, 0, nil
		}
		bytes, err = parseSeq(bs)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%w: byte credit: %v", errInvalidControl, err)
		}
		return kind, credit, bytes, nil
	default:
		return 0, 0, 0, fmt.Errorf("%w: %s is not a control kind", errInvalidControl, kind)
	}
}

// isKeepAlive reports whether h is a writer's keep-alive: its answer to
// a liveness probe while it is busy.
func isKeepAlive(h nats.Header) bool {
	ks, err := headerValue(h, HeaderKind)
	if err != nil {
		return false
	}
	k, err := parseKind(ks)
	return err == nil && k == KindKeepAlive
}

// frameHeader builds the headers of frame seq.
func frameHeader(seq uint64, kind Kind, contentType string) nats.Header {
	h := make(nats.Header, 6)
	h[HeaderSeq] = []string{strconv.FormatUint(seq, 10)}
	h[HeaderKind] = []string{kind.String()}
	if contentType != "" {
		h[wire.HeaderContentType] = []string{contentType}
	}
	return h
}

// controlHeader builds the headers of a control message; a credit message
// carries byte credit when bytes > 0.
func controlHeader(kind Kind, credit, bytes uint64) nats.Header {
	h := make(nats.Header, 3)
	h[HeaderKind] = []string{kind.String()}
	if kind == KindCredit {
		h[HeaderCredit] = []string{strconv.FormatUint(credit, 10)}
		if bytes > 0 {
			h[HeaderCreditBytes] = []string{strconv.FormatUint(bytes, 10)}
		}
	}
	return h
}

// truncate keeps hostile header values out of error messages at length.
func truncate(s string) string {
	const max = 32
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

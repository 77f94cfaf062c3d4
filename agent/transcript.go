package agent

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/subjects"
)

// TranscriptRef names the transcript of a provider request so a provider
// worker can keep it and be sent only what is new next time (an extension
// of SPEC §4's provider payload; docs/PROTOCOL.md "Transcript
// continuation").
//
// The sender promises that under one ID the transcript only grows: its
// first n messages never change. A request either carries the whole
// transcript in [ProviderRequest.Messages] (Base 0), or — once the provider
// confirmed it keeps ID (its stream answer's transcript_kept
// names it) — leaves Messages empty and carries
// in More the messages after the first Base messages of transcript ID. A
// provider that does not know this extension sees empty messages and
// refuses the request; a provider that no longer keeps ID answers
// [ErrTranscriptNotKept] (wire code conflict). Either way the sender sends
// the whole transcript again.
type TranscriptRef struct {
	// ID names the transcript: 1–128 characters of [A-Za-z0-9_-].
	ID string `json:"id"`
	// Base is how many messages of transcript ID precede More.
	Base int `json:"base,omitempty"`
	// More are the messages after the base.
	More []Message `json:"more,omitempty"`
}

// ErrTranscriptNotKept is a provider's answer to a continuation of a
// transcript it does not keep (evicted, or kept by another instance).
var ErrTranscriptNotKept = errors.New("transcript not kept here")

// Validate checks ref's shape.
func (ref TranscriptRef) Validate() error {
	if err := subjects.ValidateID("transcript.id", ref.ID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	if ref.Base < 0 {
		return fmt.Errorf("%w: transcript.base %d is negative", ErrInvalidMessage, ref.Base)
	}
	if ref.Base == 0 && len(ref.More) > 0 {
		return fmt.Errorf("%w: transcript.more without a base (send the messages in messages)", ErrInvalidMessage)
	}
	return nil
}

// Transcripts is a provider worker's store of the transcripts it was sent,
// so a continuation needs only the new messages. It is bounded in entries,
// in bytes (all transcripts together, as [MessageSize] estimates them) and
// in idle time, least recently used first out; safe for concurrent use.
// The zero value is not usable: see [NewTranscripts].
type Transcripts struct {
	max      int
	maxBytes int
	ttl      time.Duration
	now      func() time.Time

	mu    sync.Mutex
	lru   *list.List // of *keptTranscript, most recent at the front
	ids   map[string]*list.Element
	bytes int // of every kept transcript
}

type keptTranscript struct {
	id    string
	msgs  []Message
	bytes int // MessageSize of msgs
	used  time.Time
}

// Defaults of [NewTranscripts].
const (
	DefaultKeptTranscripts = 128
	DefaultTranscriptIdle  = 5 * time.Minute
	// DefaultKeptBytes bounds the kept transcripts together: a long
	// session's transcript can reach megabytes, and 128 of them would be
	// a provider worker's whole memory.
	DefaultKeptBytes = 256 << 20
)

// TranscriptsOption configures [NewTranscripts].
type TranscriptsOption func(*Transcripts)

// WithMaxKeptBytes bounds the kept transcripts' bytes together (≤ 0:
// [DefaultKeptBytes]). A transcript larger than the bound alone is not
// kept: its sender sends it whole each time.
func WithMaxKeptBytes(n int) TranscriptsOption {
	return func(t *Transcripts) {
		if n > 0 {
			t.maxBytes = n
		}
	}
}

// NewTranscripts keeps up to max transcripts (≤ 0: [DefaultKeptTranscripts]),
// each for idle time since its last use (≤ 0: [DefaultTranscriptIdle]),
// up to [DefaultKeptBytes] together ([WithMaxKeptBytes]).
func NewTranscripts(max int, idle time.Duration, opts ...TranscriptsOption) *Transcripts {
	if max <= 0 {
		max = DefaultKeptTranscripts
	}
	if idle <= 0 {
		idle = DefaultTranscriptIdle
	}
	t := &Transcripts{max: max, maxBytes: DefaultKeptBytes, ttl: idle, now: time.Now, lru: list.New(), ids: map[string]*list.Element{}}
	for _, o := range opts {
		o(t)
	}
	return t
}

// MessageSize estimates the bytes m holds: its texts, image data, ids and
// a call's arguments as JSON, plus a fixed overhead per block.
func MessageSize(m Message) int {
	n := 64 + len(m.ErrorMessage) + len(m.FunctionCallID) + len(m.FunctionID)
	for _, c := range m.Content {
		n += 32 + len(c.Text) + len(c.Data) + len(c.ID) + len(c.FunctionID) + len(c.Signature)
		if len(c.Arguments) > 0 {
			if b, err := json.Marshal(c.Arguments); err == nil {
				n += len(b)
			}
		}
	}
	return n
}

func messagesSize(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		n += MessageSize(m)
	}
	return n
}

// Resolve returns the whole transcript of a request whose reference is
// ref and whose messages are msgs: a continuation (ref.Base > 0) gets the
// first Base kept messages followed by ref.More; a request without a
// reference, or a whole one, gets msgs. It answers an error wrapping
// [ErrTranscriptNotKept] when the base is not kept, and one wrapping
// [ErrInvalidMessage] for a malformed reference or a continuation that
// also carries messages. Keep the result with [Transcripts.Keep] once the
// request was found valid.
func (t *Transcripts) Resolve(ref *TranscriptRef, msgs []Message) ([]Message, error) {
	if ref == nil {
		return msgs, nil
	}
	if err := ref.Validate(); err != nil {
		return nil, err
	}
	if ref.Base == 0 {
		return msgs, nil
	}
	if len(msgs) > 0 {
		return nil, fmt.Errorf("%w: a continuation (transcript.base %d) carries its messages in transcript.more, not messages", ErrInvalidMessage, ref.Base)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	el, ok := t.ids[ref.ID]
	if !ok {
		return nil, fmt.Errorf("%w: transcript %s", ErrTranscriptNotKept, ref.ID)
	}
	k := el.Value.(*keptTranscript)
	now := t.now()
	if now.Sub(k.used) > t.ttl || len(k.msgs) < ref.Base {
		return nil, fmt.Errorf("%w: transcript %s (%d messages kept, base %d)", ErrTranscriptNotKept, ref.ID, len(k.msgs), ref.Base)
	}
	var out []Message
	if len(k.msgs) == ref.Base {
		// Append in place and keep the longer slice at once: readers of
		// an earlier request hold a shorter slice that does not see the
		// appended part, and a concurrent continuation from the same base
		// now finds more kept than its base and copies.
		k.msgs = append(k.msgs, ref.More...)
		more := messagesSize(ref.More)
		k.bytes += more
		t.bytes += more
		out = k.msgs
	} else {
		out = append(k.msgs[:ref.Base:ref.Base], ref.More...) // a retried continuation: copy
	}
	k.used = now
	t.lru.MoveToFront(el)
	t.trim(el)
	return out, nil
}

// Keep remembers msgs, the whole transcript [Transcripts.Resolve]
// returned, under ref's id, and returns that id ("" when nothing was kept:
// no or a malformed reference, no messages). A provider names the id in
// its stream answer (transcript_kept), so the sender may continue it.
func (t *Transcripts) Keep(ref *TranscriptRef, msgs []Message) string {
	if ref == nil || ref.Validate() != nil || len(msgs) == 0 {
		return ""
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	el, ok := t.ids[ref.ID]
	if ok {
		k := el.Value.(*keptTranscript)
		if len(msgs) < len(k.msgs) || len(k.msgs) == 0 || &msgs[0] != &k.msgs[0] {
			// Not the kept slice grown by Resolve: size it anew.
			t.bytes -= k.bytes
			k.bytes = messagesSize(msgs)
			t.bytes += k.bytes
		} else if len(msgs) > len(k.msgs) {
			more := messagesSize(msgs[len(k.msgs):])
			k.bytes += more
			t.bytes += more
		}
		k.msgs, k.used = msgs, now
		t.lru.MoveToFront(el)
	} else {
		k := &keptTranscript{id: ref.ID, msgs: msgs, bytes: messagesSize(msgs), used: now}
		t.bytes += k.bytes
		el = t.lru.PushFront(k)
		t.ids[ref.ID] = el
	}
	for t.lru.Len() > t.max {
		t.drop(t.lru.Back())
	}
	for el := t.lru.Back(); el != nil && now.Sub(el.Value.(*keptTranscript).used) > t.ttl; el = t.lru.Back() {
		t.drop(el)
	}
	if !t.trim(el) {
		return "" // larger than the bound alone: not kept
	}
	return ref.ID
}

// trim drops least recently used transcripts while the kept bytes exceed
// the bound, sparing keep (the one just used); it reports whether keep is
// still kept: a transcript larger than the bound alone is dropped, and
// only it.
func (t *Transcripts) trim(keep *list.Element) bool {
	if keep.Value.(*keptTranscript).bytes > t.maxBytes {
		t.drop(keep)
		return false
	}
	for t.bytes > t.maxBytes {
		el := t.lru.Back()
		if el == keep {
			el = el.Prev()
		}
		t.drop(el)
	}
	return true
}

// Bytes is the estimated size of the kept transcripts together.
func (t *Transcripts) Bytes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bytes
}

// Len is how many transcripts are kept.
func (t *Transcripts) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}

func (t *Transcripts) drop(el *list.Element) {
	k := el.Value.(*keptTranscript)
	delete(t.ids, k.id)
	t.bytes -= k.bytes
	t.lru.Remove(el)
}

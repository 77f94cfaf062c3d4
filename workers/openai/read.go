package openai

import (
	"bytes"
	"context"
	"time"

	"github.com/openai/openai-go/v3/packages/ssestream"
)

// itemBuffer is how many decoded chunks the reading goroutine may be
// ahead of the writing one.
const itemBuffer = 256

// doneMarker is the data of the event that ends an OpenAI stream.
var doneMarker = []byte("[DONE]")

// drainGrace bounds the wait for the end of the body after [DONE].
const drainGrace = 250 * time.Millisecond

// item is one event of the stream as the reading goroutine decoded it:
// a chunk, or what ended the stream ([DONE], an error event, data that
// does not decode, a broken connection). The end of the body closes the
// items.
type item struct {
	c chunk
	// done is [DONE]: nothing follows but the end of the body.
	done bool
	// fail is the failure an error event of the server reported.
	fail *failure
	// bad is the decoding error of an event's data.
	bad error
	// err is the error that broke the stream.
	err error
}

// isChunk reports whether the item is a chunk (not an end).
func (it *item) isChunk() bool { return !it.done && it.fail == nil && it.bad == nil && it.err == nil }

// read decodes the SSE events of dec into items until [DONE] (after which
// it reads the body to its end, so that the connection may be reused), the
// end of the body, an event that ends the stream, or ctx's end, then
// closes the body and items. Each item owns its chunk (nothing is shared
// with the next one), so the writing side may keep it while read goes on.
func (p *Provider) read(ctx context.Context, dec ssestream.Decoder, sc scrubber, items chan<- item) {
	defer close(items)
	defer func() { _ = dec.Close() }()
	send := func(it *item) bool {
		select {
		case items <- *it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var it item
	for dec.Next() {
		ev := dec.Event()
		if bytes.HasPrefix(ev.Data, doneMarker) {
			if send(&item{done: true}) {
				for dec.Next() { // what a server sends after [DONE] is ignored
				}
			}
			return
		}
		it = item{}
		if err := decodeChunk(ev.Data, &it.c); err != nil {
			it.bad = err
		} else if it.c.Error != "" || ev.Type == "error" {
			raw := it.c.Error
			if raw == "" {
				raw = string(ev.Data)
			}
			it.fail = p.errorChunkFailure(raw, sc)
		}
		if !send(&it) || !it.isChunk() {
			return
		}
	}
	if err := dec.Err(); err != nil {
		send(&item{err: err})
	}
}

// deltaKind is what a plain delta chunk extends.
type deltaKind struct {
	field byte  // 'c' content, 't' reasoning text, 'a' tool call arguments
	index int64 // the tool call's index ('a')
}

// deltaOf returns the text of a plain delta chunk, the one kind of chunk
// that coalescing merges, and what it extends: one choice (index 0, no
// finish_reason, no usage) whose delta holds exactly one of content,
// reasoning text or one tool call's arguments, and no usage or error
// beside it. A follower (a chunk to be merged into an earlier one) must
// also not name a call or give it an id. It returns nil for any other
// chunk.
func deltaOf(c *chunk, follower bool) (*string, deltaKind) {
	if c.Usage != nil || c.Error != "" || len(c.Choices) != 1 {
		return nil, deltaKind{}
	}
	ch := &c.Choices[0]
	if ch.Index != 0 || ch.FinishReason != "" || ch.Usage != nil {
		return nil, deltaKind{}
	}
	d := &ch.Delta
	if d.Refusal != "" {
		return nil, deltaKind{}
	}
	switch thinking := d.thinking(); {
	case d.Content != "" && thinking == "" && len(d.ToolCalls) == 0:
		return &d.Content, deltaKind{field: 'c'}
	case thinking != "" && d.Content == "" && len(d.ToolCalls) == 0:
		// The field thinking() reads: merging into it keeps it first.
		if d.ReasoningContent != "" {
			return &d.ReasoningContent, deltaKind{field: 't'}
		}
		return &d.Reasoning, deltaKind{field: 't'}
	case len(d.ToolCalls) == 1 && d.Content == "" && thinking == "":
		tc := &d.ToolCalls[0]
		if tc.Function.Arguments == "" || follower && (tc.ID != "" || tc.Function.Name != "") {
			return nil, deltaKind{}
		}
		return &tc.Function.Arguments, deltaKind{field: 'a', index: tc.Index}
	}
	return nil, deltaKind{}
}

// coalescer hands the reading goroutine's items to the writing side in
// order. When it hands out a plain delta chunk, the plain delta chunks of
// the same kind that are already waiting (read while the previous event
// went out) are merged into it, up to limit bytes of text; it never waits
// for one. With limit 0 it hands out every chunk as it came.
type coalescer struct {
	items  <-chan item
	limit  int
	held   item // taken from items while merging, and next in line
	isHeld bool
	closed bool
	buf    []byte
}

// next returns the next item; false once the items are closed and taken.
func (f *coalescer) next() (item, bool) {
	var it item
	switch {
	case f.isHeld:
		it, f.held, f.isHeld = f.held, item{}, false
	case f.closed:
		return item{}, false
	default:
		var ok bool
		if it, ok = <-f.items; !ok {
			f.closed = true
			return item{}, false
		}
	}
	if f.limit > 0 && it.isChunk() {
		f.merge(&it)
	}
	return it, true
}

// merge appends to it's delta the deltas of the chunks waiting in items
// that extend the same thing, until one does not (it is held for next),
// none is waiting, or the text would pass the limit.
func (f *coalescer) merge(it *item) {
	field, kind := deltaOf(&it.c, false)
	if field == nil {
		return
	}
	n := len(*field)
	merged := false
	for !f.closed {
		nx, ok := f.poll()
		if !ok {
			break
		}
		if nx.isChunk() {
			if nf, nk := deltaOf(&nx.c, true); nf != nil && nk == kind && n+len(*nf) <= f.limit {
				if !merged {
					f.buf = append(f.buf[:0], *field...)
					merged = true
				}
				f.buf = append(f.buf, *nf...)
				n += len(*nf)
				continue
			}
		}
		f.held, f.isHeld = nx, true
		break
	}
	if merged {
		*field = string(f.buf)
	}
}

// poll takes an item that is waiting, without blocking; false when none
// is or the items are closed.
func (f *coalescer) poll() (item, bool) {
	select {
	case it, ok := <-f.items:
		if !ok {
			f.closed = true
		}
		return it, ok
	default:
		return item{}, false
	}
}

package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// WorkerName is the name of the worker [Serve] starts.
const WorkerName = "state"

// Function ids served by [Serve].
const (
	FnGet    = "state::get"
	FnSet    = "state::set"
	FnUpdate = "state::update"
	FnDelete = "state::delete"
	FnList   = "state::list"
)

// GetResponse is the reply of state::get. A missing key reads as
// {value: null, revision: 0}.
type GetResponse struct {
	Value    any    `json:"value"`
	Revision uint64 `json:"revision"`
}

// ChangeResponse is the reply of state::set and state::update.
type ChangeResponse struct {
	OldValue any `json:"old_value"`
	NewValue any `json:"new_value"`
}

// DeleteResponse is the reply of state::delete; old_value is null when the
// key did not exist.
type DeleteResponse struct {
	OldValue any `json:"old_value"`
}

// ListResponse is the reply of state::list. Truncated is set when limit, or
// the server's max payload, cut the list short; ask again with after set to
// the last key received. Every page holds at least one item when any is
// left: an item too large for a message alone comes with value null and
// value_unavailable set (read it with state::get, or the KV bucket).
type ListResponse struct {
	Items     []Item `json:"items"`
	Truncated bool   `json:"truncated,omitempty"`
}

// Serve starts the "state" worker, which serves state::get, state::set,
// state::update, state::delete and state::list over store. Close the
// returned worker to stop serving. Every function accepts JSON (for the
// nats CLI and other languages) and msgpack, validates its payload and
// answers bad input with invalid_payload.
func Serve(ctx context.Context, e *engine.Engine, store *Store) (*engine.Worker, error) {
	if e == nil || store == nil {
		return nil, fmt.Errorf("%w: nil engine or store", engine.ErrInvalidOption)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w, err := e.Worker(WorkerName, engine.WithDescription("iii state: JSON values by scope and key in JetStream KV"))
	if err != nil {
		return nil, err
	}
	h := handlers{s: store}
	fns := []engine.Function{
		{ID: FnGet, Description: "Read the value of a key: {scope, key} -> {value, revision}; a missing key is {value: null, revision: 0}.",
			RequestSchema: schemaGetRequest, ResponseSchema: schemaGetResponse, Idempotent: true, Handler: h.get},
		{ID: FnSet, Description: "Store a JSON value under a key: {scope, key, value} -> {old_value, new_value}.",
			RequestSchema: schemaSetRequest, ResponseSchema: schemaChangeResponse, Idempotent: true, Handler: h.set},
		{ID: FnUpdate, Description: "Apply operations atomically (compare-and-set): {scope, key, ops[]} -> {old_value, new_value}.",
			RequestSchema: schemaUpdateRequest, ResponseSchema: schemaChangeResponse, Handler: h.update},
		{ID: FnDelete, Description: "Delete a key: {scope, key} -> {old_value}; deleting a missing key is not an error.",
			RequestSchema: schemaKeyRequest, ResponseSchema: schemaDeleteResponse, Idempotent: true, Handler: h.delete},
		{ID: FnList, Description: "List the keys of a scope under a prefix with their values, sorted by key: {scope, prefix?, after?, limit?} -> {items[], truncated?}.",
			RequestSchema: schemaListRequest, ResponseSchema: schemaListResponse, Idempotent: true, Handler: h.list},
	}
	for _, fn := range fns {
		if err := w.Register(fn); err != nil {
			_ = w.Close(ctx)
			return nil, err
		}
	}
	return w, nil
}

type handlers struct{ s *Store }

func (h handlers) get(ctx context.Context, r *engine.Request) (any, error) {
	args, err := decodeArgs(r, "scope", "key")
	if err != nil {
		return nil, err
	}
	scope, key, err := scopeKey(args)
	if err != nil {
		return nil, err
	}
	v, rev, err := h.s.Get(ctx, scope, key)
	if err != nil {
		if wire.From(err).Code == wire.CodeNotFound {
			return GetResponse{}, nil
		}
		return nil, err
	}
	return GetResponse{Value: v, Revision: rev}, nil
}

func (h handlers) set(ctx context.Context, r *engine.Request) (any, error) {
	args, err := decodeArgs(r, "scope", "key", "value")
	if err != nil {
		return nil, err
	}
	scope, key, err := scopeKey(args)
	if err != nil {
		return nil, err
	}
	value, ok := args["value"]
	if !ok {
		return nil, wire.Errorf(wire.CodeInvalidPayload, "value is required (send null to store null)")
	}
	old, next, err := h.s.Set(ctx, scope, key, value)
	if err != nil {
		return nil, err
	}
	return ChangeResponse{OldValue: old, NewValue: next}, nil
}

func (h handlers) update(ctx context.Context, r *engine.Request) (any, error) {
	args, err := decodeArgs(r, "scope", "key", "ops")
	if err != nil {
		return nil, err
	}
	scope, key, err := scopeKey(args)
	if err != nil {
		return nil, err
	}
	ops, err := parseOps(args["ops"])
	if err != nil {
		return nil, err
	}
	old, next, err := h.s.Update(ctx, scope, key, ops)
	if err != nil {
		return nil, err
	}
	return ChangeResponse{OldValue: old, NewValue: next}, nil
}

func (h handlers) delete(ctx context.Context, r *engine.Request) (any, error) {
	args, err := decodeArgs(r, "scope", "key")
	if err != nil {
		return nil, err
	}
	scope, key, err := scopeKey(args)
	if err != nil {
		return nil, err
	}
	old, err := h.s.Delete(ctx, scope, key)
	if err != nil {
		return nil, err
	}
	return DeleteResponse{OldValue: old}, nil
}

func (h handlers) list(ctx context.Context, r *engine.Request) (any, error) {
	args, err := decodeArgs(r, "scope", "prefix", "after", "limit")
	if err != nil {
		return nil, err
	}
	scope, err := stringArg(args, "scope", true)
	if err != nil {
		return nil, err
	}
	prefix, err := stringArg(args, "prefix", false)
	if err != nil {
		return nil, err
	}
	after, err := stringArg(args, "after", false)
	if err != nil {
		return nil, err
	}
	limit := 0
	if v, ok := args["limit"]; ok && v != nil {
		n, _ := toNumber(v)
		f := -1.0 // not a number
		switch x := n.(type) {
		case int64:
			f = float64(x)
		case float64: // 2.0 is 2
			f = x
		}
		if f != math.Trunc(f) || f < 0 || f > math.MaxInt32 {
			return nil, wire.Errorf(wire.CodeInvalidPayload, "limit must be a non-negative integer")
		}
		limit = int(f)
	}
	// Read one value past the limit: truncated says that another item is
	// left, not merely another key.
	batch := listBatch
	if limit > 0 {
		batch = limit + 1
	}
	budget := int(h.s.e.Conn().MaxPayload()) - payloadHeadroom
	page := listPage{codec: r.Codec, budget: budget}
	err = h.s.scan(ctx, scope, prefix, after, batch, budget, func(it rawItem) bool {
		if limit > 0 && len(page.items) == limit {
			page.truncated = true
			return false
		}
		return page.add(it)
	})
	if err == nil {
		err = page.err
	}
	if err != nil {
		return nil, err
	}
	return page.body(), nil
}

// listPage builds a state::list reply item by item. Each item is encoded
// once, as it is added: its size decides whether it fits, and the reply is
// the encoded items put together, not encoded again.
type listPage struct {
	codec     wire.Codec
	budget    int // bytes left for items
	items     [][]byte
	truncated bool
	err       error
}

// add adds it when it fits and reports whether the page takes more.
func (p *listPage) add(it rawItem) bool {
	b, err := p.item(it)
	if err != nil {
		p.err = err
		return false
	}
	if b == nil || len(b)+1 > p.budget { // +1: the separator
		if len(p.items) > 0 {
			p.truncated = true
			return false
		}
		// One item alone does not fit (only a value written by a foreign
		// client can be that large): send it without its value, so the
		// page still moves past it.
		if b, p.err = p.encode(Item{Key: it.key, Revision: it.rev, ValueUnavailable: true}); p.err != nil {
			return false
		}
	}
	p.budget -= len(b) + 1
	p.items = append(p.items, b)
	return true
}

// item encodes it for the reply, or returns nil when it is too large for
// the page, which some values tell without being encoded.
func (p *listPage) item(it rawItem) ([]byte, error) {
	if p.codec.ContentType() == wire.ContentJSON && it.own && utf8.Valid(it.data) && json.Valid(it.data) {
		// JSON this store wrote, which decoding and encoding again would
		// give back: it goes in as it is, digits and all.
		if len(it.data) > p.budget {
			return nil, nil
		}
		key, err := wire.MarshalJSON(it.key)
		if err != nil {
			return nil, wire.Wrap(wire.CodeInternal, err, "list item %q does not encode", it.key)
		}
		b := make([]byte, 0, len(key)+len(it.data)+48)
		b = append(append(append(b, `{"key":`...), key...), `,"value":`...)
		b = append(append(b, it.data...), `,"revision":`...)
		return append(strconv.AppendUint(b, it.rev, 10), '}'), nil
	}
	v, isJSON := decodeJSON(it.data)
	if !isJSON {
		// Not JSON (a foreign write): it reads as a string, whose encoded
		// size is known without encoding it (control bytes take six
		// bytes each in JSON: a large one is slow to encode).
		if stringSize(p.codec, it.data) > p.budget {
			return nil, nil
		}
		v = string(it.data)
	}
	return p.encode(Item{Key: it.key, Value: v, Revision: it.rev})
}

// stringSize is the size of s encoded as a string in codec: for JSON, as
// encoding/json writes it without HTML escaping.
func stringSize(codec wire.Codec, s []byte) int {
	if codec.ContentType() == wire.ContentMsgpack {
		switch n := len(s); {
		case n < 32:
			return n + 1
		case n <= math.MaxUint8:
			return n + 2
		case n <= math.MaxUint16:
			return n + 3
		default:
			return n + 5
		}
	}
	n := 2 // quotes
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			case c < 0x20:
				n += 6 // \u00XX
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			n += 6 // \ufffd, \u2028, \u2029
		} else {
			n += size
		}
		i += size
	}
	return n
}

func (p *listPage) encode(it Item) ([]byte, error) {
	b, err := p.codec.Marshal(it)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "list item %q does not encode", it.Key)
	}
	return b, nil
}

// body is the reply, a [ListResponse] in the request's codec.
func (p *listPage) body() engine.Raw {
	size := 32
	for _, b := range p.items {
		size += len(b) + 1
	}
	out := make([]byte, 0, size)
	if p.codec.ContentType() == wire.ContentMsgpack {
		fields := byte(1)
		if p.truncated {
			fields = 2
		}
		out = append(out, 0x80|fields) // fixmap
		out = append(out, 0xa0|5)
		out = append(out, "items"...)
		switch n := len(p.items); {
		case n < 16:
			out = append(out, 0x90|byte(n)) // fixarray
		case n <= math.MaxUint16:
			out = binary.BigEndian.AppendUint16(append(out, 0xdc), uint16(n))
		default:
			out = binary.BigEndian.AppendUint32(append(out, 0xdd), uint32(n))
		}
		for _, b := range p.items {
			out = append(out, b...)
		}
		if p.truncated {
			out = append(out, 0xa0|9)
			out = append(out, "truncated"...)
			out = append(out, 0xc3) // true
		}
		return out
	}
	out = append(out, `{"items":[`...)
	for i, b := range p.items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	out = append(out, ']')
	if p.truncated {
		out = append(out, `,"truncated":true`...)
	}
	return append(out, '}')
}

// decodeArgs decodes the payload as an object and refuses fields outside
// allowed, so a misspelt field is an error rather than silently ignored.
// JSON numbers are decoded exact (see value.go), as msgpack's are.
func decodeArgs(r *engine.Request, allowed ...string) (map[string]any, error) {
	var m map[string]any
	if r.Codec.ContentType() == wire.ContentJSON {
		if err := decodeJSONArgs(r.Data, &m); err != nil {
			return nil, wire.Wrap(wire.CodeInvalidPayload, nil, "payload does not decode as %s: %v", wire.ContentJSON, err)
		}
	} else if err := r.Bind(&m); err != nil {
		return nil, err
	}
	for k := range m {
		if !slices.Contains(allowed, k) {
			return nil, wire.Errorf(wire.CodeInvalidPayload, "unknown field %q (expected %v)", k, allowed)
		}
	}
	return m, nil
}

// decodeJSONArgs is the JSON codec's decoding of a request (an empty body
// is {}), with exact numbers.
func decodeJSONArgs(data []byte, m *map[string]any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(m); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("trailing data after the value")
	}
	_, err := exactNumbers(*m)
	return err
}

func stringArg(m map[string]any, name string, required bool) (string, error) {
	v, ok := m[name]
	if !ok || v == nil {
		if required {
			return "", wire.Errorf(wire.CodeInvalidPayload, "%s is required", name)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", wire.Errorf(wire.CodeInvalidPayload, "%s must be a string, not %s", name, typeName(v))
	}
	return s, nil
}

func scopeKey(m map[string]any) (scope, key string, err error) {
	if scope, err = stringArg(m, "scope", true); err != nil {
		return "", "", err
	}
	if key, err = stringArg(m, "key", true); err != nil {
		return "", "", err
	}
	if _, err := kvKey(scope, key); err != nil {
		return "", "", err
	}
	return scope, key, nil
}

// parseOps converts the decoded ops array of a state::update request.
func parseOps(v any) ([]Op, error) {
	raw, ok := v.([]any)
	if !ok {
		if v == nil {
			return nil, wire.Errorf(wire.CodeInvalidPayload, "ops is required")
		}
		return nil, wire.Errorf(wire.CodeInvalidPayload, "ops must be an array, not %s", typeName(v))
	}
	if len(raw) > MaxOps {
		return nil, wire.Wrap(wire.CodeInvalidPayload, ErrInvalidOp, "%d ops, at most %d", len(raw), MaxOps)
	}
	ops := make([]Op, 0, len(raw))
	for i, x := range raw {
		m, ok := x.(map[string]any)
		if !ok {
			return nil, wire.Errorf(wire.CodeInvalidPayload, "ops[%d] must be an object, not %s", i, typeName(x))
		}
		var op Op
		for k, f := range m {
			switch k {
			case "type":
				s, ok := f.(string)
				if !ok {
					return nil, wire.Errorf(wire.CodeInvalidPayload, "ops[%d].type must be a string", i)
				}
				op.Type = OpType(s)
			case "path":
				if f == nil {
					continue
				}
				s, ok := f.(string)
				if !ok {
					return nil, wire.Errorf(wire.CodeInvalidPayload, "ops[%d].path must be a string", i)
				}
				op.Path = s
			case "value":
				op.Value = f
			case "by":
				if f == nil {
					continue
				}
				n, ok := toNumber(f)
				if !ok {
					return nil, wire.Errorf(wire.CodeInvalidPayload, "ops[%d].by must be a number, not %s", i, typeName(f))
				}
				op.By = n
			default:
				return nil, wire.Errorf(wire.CodeInvalidPayload, "ops[%d]: unknown field %q (expected type, path, value, by)", i, k)
			}
		}
		ops = append(ops, op)
	}
	if err := validateOps(ops); err != nil {
		return nil, err
	}
	return ops, nil
}

// toNumber reads a decoded number of either codec in the decoded shape:
// an int64, a uint64 or a finite float64.
func toNumber(v any) (any, bool) {
	switch v.(type) {
	case float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		n, err := normalize(v)
		return n, err == nil
	}
	return nil, false
}

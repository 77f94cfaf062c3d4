package state

import (
	"context"
	"fmt"
	"math"
	"slices"

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
	return GetResponse{Value: forCodec(r, v), Revision: rev}, nil
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
	return ChangeResponse{OldValue: forCodec(r, old), NewValue: forCodec(r, next)}, nil
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
	return ChangeResponse{OldValue: forCodec(r, old), NewValue: forCodec(r, next)}, nil
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
	return DeleteResponse{OldValue: forCodec(r, old)}, nil
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
		f, ok := toFloat(v)
		if !ok || f != math.Trunc(f) || f < 0 || f > math.MaxInt32 {
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
	resp := ListResponse{Items: []Item{}}
	budget := int(h.s.e.Conn().MaxPayload()) - payloadHeadroom
	var itemErr error
	err = h.s.scan(ctx, scope, prefix, after, batch, func(it Item) bool {
		if limit > 0 && len(resp.Items) == limit {
			resp.Truncated = true
			return false
		}
		it.Value = forCodec(r, it.Value)
		n, err := itemSize(r, it)
		if err != nil {
			itemErr = err
			return false
		}
		if n > budget && len(resp.Items) == 0 {
			// One item alone does not fit (only a value written by a
			// foreign client can be that large): send it without its value,
			// so the page still moves past it.
			it.Value, it.ValueUnavailable = nil, true
			if n, itemErr = itemSize(r, it); itemErr != nil {
				return false
			}
		}
		if budget -= n; budget < 0 {
			resp.Truncated = true
			return false
		}
		resp.Items = append(resp.Items, it)
		return true
	})
	if err == nil {
		err = itemErr
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// itemSize is the encoded size of it in a list reply, separator included.
func itemSize(r *engine.Request, it Item) (int, error) {
	b, err := r.Codec.Marshal(it)
	if err != nil {
		return 0, wire.Wrap(wire.CodeInternal, err, "list item %q does not encode", it.Key)
	}
	return len(b) + 1, nil
}

// forCodec shapes a decoded value for the reply codec: msgpack carries
// integral numbers as integers (as JSON text would), which also keeps a
// msgpack reply no larger than its JSON twin for integer-heavy values.
func forCodec(r *engine.Request, v any) any {
	if r.Codec.ContentType() == wire.ContentMsgpack {
		return compactNumbers(v)
	}
	return v
}

// decodeArgs decodes the payload as an object and refuses fields outside
// allowed, so a misspelt field is an error rather than silently ignored.
func decodeArgs(r *engine.Request, allowed ...string) (map[string]any, error) {
	var m map[string]any
	if err := r.Bind(&m); err != nil {
		return nil, err
	}
	for k := range m {
		if !slices.Contains(allowed, k) {
			return nil, wire.Errorf(wire.CodeInvalidPayload, "unknown field %q (expected %v)", k, allowed)
		}
	}
	return m, nil
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
				n, ok := toFloat(f)
				if !ok {
					return nil, wire.Errorf(wire.CodeInvalidPayload, "ops[%d].by must be a number, not %s", i, typeName(f))
				}
				op.By = &n
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

// toFloat reads a decoded number of either codec.
func toFloat(v any) (float64, bool) {
	switch v.(type) {
	case float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		n, err := normalize(v)
		f, ok := n.(float64)
		return f, err == nil && ok
	}
	return 0, false
}

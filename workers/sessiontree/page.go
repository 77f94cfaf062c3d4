package sessiontree

import (
	"context"
	"slices"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// An answer over the bus never outgrows the server's max payload: one
// that fits is encoded once and sent; a longer one is cut after the items
// that fit (at least one), and says how to ask for the rest.

// pageHandler serves fn, a page function of Req, with the reply limit of
// the server.
func pageHandler[Req any](s *Store, fn func(context.Context, Req, wire.Codec, int) (engine.Raw, error)) engine.Handler {
	return func(ctx context.Context, r *engine.Request) (any, error) {
		var req Req
		if err := r.Bind(&req); err != nil {
			return nil, err
		}
		return fn(ctx, req, r.Codec, s.replyLimit())
	}
}

// replyLimit is how many bytes the lists of an answer may take.
func (s *Store) replyLimit() int { return int(s.nc.MaxPayload()) - replyRoom }

// fitting counts the first items whose encodings in codec, one after the
// other, take at most limit bytes: at least one when there is any (an
// item alone over the limit fails the reply, as it would unpaged).
func fitting[T any](codec wire.Codec, items []T, limit int, what string) (int, error) {
	size := 0
	for n := range items {
		b, err := codec.Marshal(items[n])
		if err != nil {
			return 0, wire.Wrap(wire.CodeInternal, err, "encode %s", what)
		}
		if size += len(b) + 1; size > limit && n > 0 { // and a comma
			return n, nil
		}
	}
	return len(items), nil
}

// encodePage encodes resp, whose list is *items, in codec in at most
// limit bytes: whole when it fits, else with *items cut to those that fit
// and *truncated set.
func encodePage[T any](codec wire.Codec, limit int, resp any, items *[]T, truncated *bool, what string) (engine.Raw, error) {
	body, err := codec.Marshal(resp)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode %s", what)
	}
	if len(body) <= limit {
		return body, nil
	}
	n, err := fitting(codec, *items, limit, what)
	if err != nil {
		return nil, err
	}
	*items, *truncated = (*items)[:n], n < len(*items)
	if body, err = codec.Marshal(resp); err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode %s", what)
	}
	return body, nil
}

// entriesPage is the answer of session::entries to req: the entries of
// the path after req.After that fit limit bytes in codec (Truncated: more
// follow).
func (s *Store) entriesPage(ctx context.Context, req EntriesRequest, codec wire.Codec, limit int) (engine.Raw, error) {
	v, err := s.Entries(ctx, ReadRequest{SessionID: req.SessionID, Leaf: req.Leaf})
	if err != nil {
		return nil, err
	}
	if req.After != "" {
		i := slices.IndexFunc(v.Entries, func(e Entry) bool { return e.ID == req.After })
		if i < 0 {
			return nil, invalid("after %s is not an entry of the path to %s", req.After, req.Leaf)
		}
		v.Entries = v.Entries[i+1:]
	}
	return encodePage(codec, limit, &v, &v.Entries, &v.Truncated, "entries")
}

// treePage is the answer of session::tree to req: the nodes after
// req.After that fit limit bytes in codec (Truncated: more follow).
func (s *Store) treePage(ctx context.Context, req TreeRequest, codec wire.Codec, limit int) (engine.Raw, error) {
	v, err := s.Tree(ctx, SessionRequest{SessionID: req.SessionID})
	if err != nil {
		return nil, err
	}
	if req.After != "" {
		i := slices.IndexFunc(v.Nodes, func(n TreeNode) bool { return n.EntryID == req.After })
		if i < 0 {
			return nil, invalid("after %s is not a node of the tree of session %s", req.After, req.SessionID)
		}
		v.Nodes = v.Nodes[i+1:]
	}
	return encodePage(codec, limit, &v, &v.Nodes, &v.Truncated, "tree")
}

// listPage is the answer of session::list to req: its page, cut to the
// sessions that fit limit bytes in codec, next_cursor then following the
// last of them.
func (s *Store) listPage(ctx context.Context, req ListRequest, codec wire.Codec, limit int) (engine.Raw, error) {
	v, err := s.List(ctx, req)
	if err != nil {
		return nil, err
	}
	body, err := codec.Marshal(v)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode sessions")
	}
	if len(body) <= limit {
		return body, nil
	}
	n, err := fitting(codec, v.Sessions, limit, "sessions")
	if err != nil {
		return nil, err
	}
	if n < len(v.Sessions) {
		v.Sessions = v.Sessions[:n]
		v.NextCursor = formatCursor(v.Sessions[n-1])
	}
	if body, err = codec.Marshal(v); err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode sessions")
	}
	return body, nil
}

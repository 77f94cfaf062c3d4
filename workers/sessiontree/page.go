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
	sizes, err := itemSizes(codec, items, limit, what)
	if err != nil {
		return 0, err
	}
	return fittingSizes(sizes, len(items), limit), nil
}

// fittingSizes is fitting of items of these encoded sizes (those
// [itemSizes] gives), of count in all.
func fittingSizes(sizes []int, count, limit int) int {
	size := 0
	for n := range count {
		if size += sizes[n] + 1; size > limit && n > 0 { // and a comma
			return n
		}
	}
	return count
}

// itemSizes is the size of the encoding in codec of each of the first
// items, up to the first that takes their sum over limit bytes (and at
// least two): all of them when their encodings take at most limit bytes
// together, else enough for [fittingSizes]. A page of a long list thus encodes no more than a
// page of it, and an answer whose items alone outgrow limit is known not
// to fit whole without encoding it.
func itemSizes[T any](codec wire.Codec, items []T, limit int, what string) ([]int, error) {
	var sizes []int
	raw := 0
	for n := range items {
		b, err := codec.Marshal(items[n])
		if err != nil {
			return nil, wire.Wrap(wire.CodeInternal, err, "encode %s", what)
		}
		sizes = append(sizes, len(b))
		if raw += len(b); raw > limit && n > 0 {
			break
		}
	}
	return sizes, nil
}

// encodePage encodes resp, whose list is *items, in codec in at most
// limit bytes: whole when it fits, else with *items cut to those that fit
// and *truncated set.
func encodePage[T any](codec wire.Codec, limit int, resp any, items *[]T, truncated *bool, what string) (engine.Raw, error) {
	sizes, err := itemSizes(codec, *items, limit, what)
	if err != nil {
		return nil, err
	}
	// Items that alone outgrow limit make the whole answer outgrow it:
	// it is encoded once, cut.
	if n := fittingSizes(sizes, len(*items), limit); len(sizes) < len(*items) {
		*items, *truncated = (*items)[:n], n < len(*items)
	} else if n < len(*items) {
		// The items fit, one after the other without commas: the answer
		// may fit whole.
		body, err := codec.Marshal(resp)
		if err != nil {
			return nil, wire.Wrap(wire.CodeInternal, err, "encode %s", what)
		}
		if len(body) <= limit {
			return body, nil
		}
		*items, *truncated = (*items)[:n], true
	}
	body, err := codec.Marshal(resp)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode %s", what)
	}
	return body, nil
}

// entriesPage is the answer of session::entries to req: the entries of
// the path after req.After that fit limit bytes in codec (Truncated: more
// follow).
func (s *Store) entriesPage(ctx context.Context, req EntriesRequest, codec wire.Codec, limit int) (engine.Raw, error) {
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	_, p, err := s.pagePath(ctx, ReadRequest{SessionID: req.SessionID, Leaf: req.Leaf}, req.After != "")
	if err != nil {
		return nil, err
	}
	start := 0
	if req.After != "" {
		i := slices.IndexFunc(p, func(n node) bool { return n.id() == req.After })
		if i < 0 {
			return nil, invalid("after %s is not an entry of the path to %s", req.After, req.Leaf)
		}
		start = i + 1
	}
	v := EntriesResponse{Entries: make([]Entry, len(p)-start)}
	for i := range v.Entries {
		v.Entries[i] = p[start+i].rec.entry(p[start+i].seq)
	}
	if len(p) > 0 {
		v.Leaf = p[len(p)-1].id()
	}
	body, err := encodePage(codec, limit, &v, &v.Entries, &v.Truncated, "entries")
	if err == nil {
		s.keepPath(p, v.Truncated)
	}
	return body, err
}

// treeChunk is how many nodes a page of session::tree copies out of its
// tree at a time.
const treeChunk = 256

// treePage is the answer of session::tree to req: the nodes after
// req.After that fit limit bytes in codec (Truncated: more follow). A
// page that continues a read takes the tree an earlier page kept
// ([treeCache]); only the nodes a page can hold are copied out of it and
// encoded.
func (s *Store) treePage(ctx context.Context, req TreeRequest, codec wire.Codec, limit int) (engine.Raw, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	m, err := s.refresh(ctx, req.SessionID)
	if err != nil {
		return nil, err
	}
	t, err := s.pageTree(ctx, m, req.After != "")
	if err != nil {
		return nil, err
	}
	start, total := s.trees.position(t, req.After)
	if start < 0 {
		return nil, invalid("after %s is not a node of the tree of session %s", req.After, req.SessionID)
	}
	// The nodes up to the first that takes their encodings over limit
	// (and at least two): what [encodePage] would look at of them all.
	v := TreeResponse{SessionID: m.SessionID, ActiveLeaf: m.ActiveLeaf, Nodes: []TreeNode{}}
	raw := 0
	for at, full := start, false; at < total && !full; {
		chunk := s.trees.window(t, at, min(treeChunk, total-at))
		at += len(chunk)
		for i := range chunk {
			b, err := codec.Marshal(chunk[i])
			if err != nil {
				return nil, wire.Wrap(wire.CodeInternal, err, "encode tree")
			}
			v.Nodes = append(v.Nodes, chunk[i])
			if raw += len(b); raw > limit && len(v.Nodes) > 1 {
				full = true
				break
			}
		}
	}
	body, err := encodePage(codec, limit, &v, &v.Nodes, &v.Truncated, "tree")
	if err != nil {
		return nil, err
	}
	if v.Truncated {
		s.trees.put(t)
	} else {
		s.trees.drop(t)
	}
	return body, nil
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

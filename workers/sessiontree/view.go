package sessiontree

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Texts that introduce summaries in the model-facing messages.
const (
	CompactionPrefix    = "The conversation history before this point was compacted into the following summary:\n\n"
	BranchSummaryPrefix = "The following is a summary of a branch that this conversation came back from:\n\n"
)

// readPath reads the path of req: the meta (repaired), the leaf and the
// entries from the root to it.
func (s *Store) readPath(ctx context.Context, req ReadRequest) (Meta, []node, error) {
	return s.pagePath(ctx, req, false)
}

// pagePath is readPath for a page of a paged answer: one that continues
// a read takes the path an earlier page of it kept ([pathCache]), and
// reads it only when none did. The meta and the leaf are read on every
// page all the same (the leaf is checked to be in the session's
// history).
func (s *Store) pagePath(ctx context.Context, req ReadRequest, continues bool) (Meta, []node, error) {
	if err := req.Validate(); err != nil {
		return Meta{}, nil, err
	}
	m, err := s.refresh(ctx, req.SessionID)
	if err != nil {
		return Meta{}, nil, err
	}
	leaf, ok, err := s.leafOf(ctx, m, req.Leaf)
	if err != nil || !ok {
		return m, nil, err
	}
	if continues {
		if p, ok := s.paths.get(leaf); ok {
			return m, p, nil
		}
	}
	p, err := s.path(ctx, leaf)
	return m, p, err
}

// keepPath keeps path p for the next page of its read when more follow
// (truncated), and forgets it when its read is done.
func (s *Store) keepPath(p []node, truncated bool) {
	switch {
	case len(p) == 0:
	case truncated:
		s.paths.put(p)
	default:
		s.paths.drop(p[len(p)-1])
	}
}

// Messages returns the model-facing messages of the path to the leaf (the
// active leaf by default), oldest first, and the path itself.
func (s *Store) Messages(ctx context.Context, req ReadRequest) (MessagesResponse, error) {
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	_, p, err := s.readPath(ctx, req)
	if err != nil {
		return MessagesResponse{}, err
	}
	return buildMessages(p), nil
}

// replyRoom is what an answer leaves of the server's max payload for its
// headers and the envelope around its lists.
const replyRoom = 1024

// messagesPage is the answer of session::messages to req, encoded in
// codec in at most limit bytes, so that no path is too long to read over
// the bus: the messages after req.After that fit (at least one when any
// follows; Truncated says more follow), then the newest steps of the
// path that fit in what is left (PathOmitted counts the others). An
// answer that fits whole is the whole view, encoded once.
func (s *Store) messagesPage(ctx context.Context, req MessagesRequest, codec wire.Codec, limit int) (engine.Raw, error) {
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	_, p, err := s.pagePath(ctx, ReadRequest{SessionID: req.SessionID, Leaf: req.Leaf}, req.After != "")
	if err != nil {
		return nil, err
	}
	v := buildMessages(p)
	if req.After != "" {
		i := slices.IndexFunc(v.Messages, func(m PathMessage) bool { return m.EntryID == req.After })
		if i < 0 {
			return nil, invalid("after %s is not a message of the path to %s", req.After, req.Leaf)
		}
		v.Messages = v.Messages[i+1:]
	}
	// The messages are encoded one by one only as far as a page can go:
	// a view whose messages alone outgrow limit is not encoded whole.
	sizes, err := itemSizes(codec, v.Messages, limit, "message")
	if err != nil {
		return nil, err
	}
	if len(sizes) == len(v.Messages) {
		body, err := codec.Marshal(v)
		if err != nil {
			return nil, wire.Wrap(wire.CodeInternal, err, "encode messages")
		}
		if len(body) <= limit {
			s.keepPath(p, false)
			return body, nil
		}
	}
	page := MessagesResponse{Leaf: v.Leaf}
	size := 0
	n := 0
	for ; n < len(v.Messages); n++ {
		if size += sizes[n] + 1; size > limit && n > 0 { // and a comma
			page.Truncated = true
			break
		}
	}
	page.Messages = v.Messages[:n]
	k := len(v.Path)
	for ; k > 0 && !page.Truncated; k-- {
		b, err := codec.Marshal(v.Path[k-1])
		if err != nil {
			return nil, wire.Wrap(wire.CodeInternal, err, "encode path")
		}
		if size += len(b) + 1; size > limit {
			break
		}
	}
	page.Path, page.PathOmitted = v.Path[k:], k
	body, err := codec.Marshal(page)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode messages")
	}
	s.keepPath(p, page.Truncated)
	return body, nil
}

// buildMessages is the model's view of path p. The last compaction on the
// path wins: its summary comes first (as a user message carrying the
// compaction's entry id), then the entries from its first_kept_entry_id
// (or, without one, those after it). Compaction entries never appear
// verbatim, branch summaries become user messages, custom entries are
// left out.
func buildMessages(p []node) MessagesResponse {
	resp := MessagesResponse{Messages: make([]PathMessage, 0, len(p)+1), Path: make([]PathStep, len(p))}
	last := -1
	for i := range p {
		resp.Path[i] = PathStep{EntryID: p[i].id(), Type: p[i].rec.Type}
		if p[i].rec.Type == TypeCompaction {
			last = i
		}
	}
	if len(p) > 0 {
		resp.Leaf = p[len(p)-1].id()
	}
	start := 0
	if last >= 0 {
		c := &p[last]
		resp.Messages = append(resp.Messages, PathMessage{EntryID: c.id(), Message: summaryMessage(CompactionPrefix, c.rec.Summary, c.rec.Timestamp)})
		start = last + 1
		for i := range last {
			if p[i].id() == c.rec.FirstKeptEntryID {
				start = i
				break
			}
		}
	}
	for i := start; i < len(p); i++ {
		r := &p[i].rec
		switch r.Type {
		case TypeMessage:
			resp.Messages = append(resp.Messages, PathMessage{EntryID: p[i].id(), Message: *r.Message})
		case TypeBranchSummary:
			resp.Messages = append(resp.Messages, PathMessage{EntryID: p[i].id(), Message: summaryMessage(BranchSummaryPrefix, r.Summary, r.Timestamp)})
		}
	}
	return resp
}

func summaryMessage(prefix, summary string, ts int64) agent.Message {
	return agent.UserText(prefix+summary, ts)
}

// Entries returns the raw entries of the path to the leaf (the active leaf
// by default), root first.
func (s *Store) Entries(ctx context.Context, req ReadRequest) (EntriesResponse, error) {
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	_, p, err := s.readPath(ctx, req)
	if err != nil {
		return EntriesResponse{}, err
	}
	resp := EntriesResponse{Entries: make([]Entry, len(p))}
	for i := range p {
		resp.Entries[i] = p[i].rec.entry(p[i].seq)
	}
	if len(p) > 0 {
		resp.Leaf = p[len(p)-1].id()
	}
	return resp, nil
}

// Tree returns every entry of the session's view: for a fork, the shared
// path from the root to the fork point, then the session's own entries,
// each oldest first, with one-line summaries and child counts. It reads
// the whole session, each entry made its one line as it is read (a
// session of large entries is not held).
func (s *Store) Tree(ctx context.Context, req SessionRequest) (TreeResponse, error) {
	if err := req.Validate(); err != nil {
		return TreeResponse{}, err
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	m, err := s.refresh(ctx, req.SessionID)
	if err != nil {
		return TreeResponse{}, err
	}
	t, err := s.buildTree(ctx, m)
	if err != nil {
		return TreeResponse{}, err
	}
	return TreeResponse{SessionID: m.SessionID, ActiveLeaf: m.ActiveLeaf, Nodes: t.window(0, len(t.nodes))}, nil
}

// entrySummary is one line of an entry's content for trees and lists.
func entrySummary(r record) string {
	var s string
	switch r.Type {
	case TypeMessage:
		s = string(r.Message.Role) + ": " + contentLine(r.Message)
	case TypeCompaction:
		s = "compaction: " + r.Summary
	case TypeBranchSummary:
		s = "branch summary: " + r.Summary
	case TypeCustom:
		s = "custom: " + r.CustomType
	}
	return oneLine(s, SummaryLen)
}

// contentLine is the first thing worth showing of a message: its first
// text, or a marker for a call, a thinking block or an image.
func contentLine(m *agent.Message) string {
	var marks []string
	for _, c := range m.Content {
		switch c.Type {
		case agent.ContentText:
			if strings.TrimSpace(c.Text) != "" {
				return c.Text
			}
		case agent.ContentFunctionCall:
			marks = append(marks, "["+c.FunctionID+"]")
		case agent.ContentImage:
			marks = append(marks, "[image]")
		case agent.ContentThinking:
			marks = append(marks, "[thinking]")
		}
	}
	if m.Role == agent.RoleFunctionResult && len(marks) == 0 {
		return "[" + m.FunctionID + " result]"
	}
	return strings.Join(marks, " ")
}

// List returns one page of sessions, most recently updated first (then by
// id). It reads every session's meta (one KV watch), so its cost grows
// with the number of sessions, not the page size. A session updated
// between two pages moves to the front and is not repeated.
func (s *Store) List(ctx context.Context, req ListRequest) (ListResponse, error) {
	if err := req.Validate(); err != nil {
		return ListResponse{}, err
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	limit := cmp.Or(req.Limit, DefaultListLimit)
	// The metas this store deferred are written first, so that a list
	// served here shows its own appends.
	s.flushAllKept(ctx)
	all, err := s.allMeta(ctx)
	if err != nil {
		return ListResponse{}, err
	}
	slices.SortFunc(all, func(a, b Meta) int {
		return cmp.Or(cmp.Compare(b.UpdatedAt, a.UpdatedAt), cmp.Compare(a.SessionID, b.SessionID))
	})
	start := 0
	if req.Cursor != "" {
		at, sid, _ := parseCursor(req.Cursor)
		start, _ = slices.BinarySearchFunc(all, Meta{UpdatedAt: at, SessionID: sid}, func(a, t Meta) int {
			return cmp.Or(cmp.Compare(t.UpdatedAt, a.UpdatedAt), cmp.Compare(a.SessionID, t.SessionID))
		})
		if start < len(all) && all[start].UpdatedAt == at && all[start].SessionID == sid {
			start++
		}
	}
	end := min(start+limit, len(all))
	resp := ListResponse{Sessions: slices.Clone(all[start:end])}
	if end < len(all) {
		resp.NextCursor = formatCursor(all[end-1])
	}
	return resp, nil
}

// allMeta reads every session's meta: one watch per copy of [MetaBucket]
// (the primary one and each region's).
func (s *Store) allMeta(ctx context.Context) ([]Meta, error) {
	regions, err := s.e.SessionRegions(ctx, "KV_"+MetaBucket)
	if err != nil {
		return nil, storeErr(ctx, err, "list sessions")
	}
	var out []Meta
	for _, r := range regions {
		kv, err := s.e.RegionKV(ctx, MetaBucket, r)
		if errors.Is(err, engine.ErrUnknownRegion) {
			continue // deleted since it was listed
		}
		if err != nil {
			return nil, storeErr(ctx, err, "list sessions of %s", subjects.RegionalBucket(MetaBucket, r))
		}
		if out, err = s.watchMeta(ctx, kv, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// watchMeta appends to out the meta of every session in kv.
func (s *Store) watchMeta(ctx context.Context, kv jetstream.KeyValue, out []Meta) ([]Meta, error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, storeErr(ctx, err, "list sessions of %s", kv.Bucket())
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil, storeErr(ctx, ctx.Err(), "list sessions")
		case e, ok := <-w.Updates():
			if !ok {
				return nil, wire.Errorf(wire.CodeUnavailable, "list sessions of %s: watch ended", kv.Bucket())
			}
			if e == nil {
				return out, nil
			}
			var m Meta
			if err := json.Unmarshal(e.Value(), &m); err != nil || m.SessionID != e.Key() {
				s.opts.logger.Warn("session meta does not decode", "bucket", kv.Bucket(), "key", e.Key())
				continue
			}
			out = append(out, m)
		}
	}
}

// formatCursor is the cursor after m: "<updated_at>.<session_id>".
func formatCursor(m Meta) string {
	return strconv.FormatInt(m.UpdatedAt, 10) + "." + m.SessionID
}

func parseCursor(c string) (int64, string, error) {
	at, sid, ok := strings.Cut(c, ".")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || n < 0 || subjects.ValidateSessionID(sid) != nil {
		return 0, "", invalid("cursor %q is not a next_cursor", c)
	}
	return n, sid, nil
}

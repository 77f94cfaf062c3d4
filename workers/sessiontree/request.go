package sessiontree

import (
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/subjects"
)

// Bounds of the requests.
const (
	// MaxBatchEntries bounds the entries of one append_batch.
	MaxBatchEntries = 1024
	// DefaultListLimit and MaxListLimit bound one page of session::list.
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

func validSessionID(sid string) error {
	if err := subjects.ValidateSessionID(sid); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func validEntryRef(kind, id string, required bool) error {
	if id == "" {
		if required {
			return invalid("%s is required", kind)
		}
		return nil
	}
	if _, err := ParseEntryID(id); err != nil {
		return invalid("%s: %v", kind, err)
	}
	return nil
}

// validOptionalSessionID checks a session id the caller may leave out
// (one to create): a plain id or "<region>.<name>".
func validOptionalSessionID(kind, sid string) error {
	if sid == "" {
		return nil
	}
	if err := subjects.ValidateSessionID(sid); err != nil {
		return invalid("%s: %v", kind, err)
	}
	return nil
}

// validForkID checks the id of a fork (or clone) of session sid: a fork
// reads the history it shares from the stream copy of its own home
// region, so it must be homed where sid is.
func validForkID(sid, newID string) error {
	if err := validOptionalSessionID("new_session_id", newID); err != nil {
		return err
	}
	if newID != "" && subjects.SessionRegion(newID) != subjects.SessionRegion(sid) {
		return invalid("new_session_id %q: a fork of session %q must have its home region %q", newID, sid, subjects.SessionRegion(sid))
	}
	return nil
}

// validDedupSince checks dedup_since_ms: not negative, and only with a
// dedup_id (it says when to look that id up from).
func validDedupSince(dedupID string, sinceMs int64) error {
	switch {
	case sinceMs < 0:
		return invalid("dedup_since_ms %d is negative", sinceMs)
	case sinceMs > 0 && dedupID == "":
		return invalid("dedup_since_ms needs a dedup_id to look up")
	}
	return nil
}

// validOptionalID checks an optional id that is one token (a dedup_id).
func validOptionalID(kind, id string) error {
	if id == "" {
		return nil
	}
	if err := subjects.ValidateID(kind, id); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// CreateRequest is the request of session::create.
type CreateRequest struct {
	// SessionID is optional ("s_<nuid>" when empty); an existing id is a
	// conflict. "<region>.<name>" homes the session in that region's
	// copies of the stream and the bucket (see the package doc).
	SessionID   string `json:"session_id,omitempty"`
	DisplayName string `json:"display_name,omitempty"`
}

// Validate checks the ids and the display name.
func (r CreateRequest) Validate() error {
	if err := validOptionalSessionID("session_id", r.SessionID); err != nil {
		return err
	}
	return validDisplayName(r.DisplayName)
}

// CreateResponse is the answer of session::create, session::fork and
// session::clone: the new session's id.
type CreateResponse struct {
	SessionID string `json:"session_id"`
}

// EnsureRequest is the request of session::ensure.
type EnsureRequest struct {
	SessionID string `json:"session_id"`
	// DisplayName is used only when the session is created.
	DisplayName string `json:"display_name,omitempty"`
}

// Validate checks the id and the display name.
func (r EnsureRequest) Validate() error {
	if err := validSessionID(r.SessionID); err != nil {
		return err
	}
	return validDisplayName(r.DisplayName)
}

// EnsureResponse is the answer of session::ensure.
type EnsureResponse struct {
	SessionID string `json:"session_id"`
	// Created is true when this call created the session.
	Created bool `json:"created"`
}

// SessionRequest names a session (session::get, session::tree).
type SessionRequest struct {
	SessionID string `json:"session_id"`
}

// Validate checks the id.
func (r SessionRequest) Validate() error { return validSessionID(r.SessionID) }

// AppendRequest is the request of session::append: one entry (or, as a
// shorthand, one message) under parent_id, or under the active leaf.
type AppendRequest struct {
	SessionID string `json:"session_id"`
	// ParentID is optional: empty appends under the active leaf (the root
	// when the session has no history).
	ParentID string         `json:"parent_id,omitempty"`
	Entry    *Entry         `json:"entry,omitempty"`
	Message  *agent.Message `json:"message,omitempty"`
	// DedupID makes a retried append a no-op for ten minutes: the retry
	// answers the entry id of the first attempt.
	DedupID string `json:"dedup_id,omitempty"`
	// DedupSinceMs makes a retry exact for any length of time: the first
	// attempt, if any, was stored no earlier than this (Unix ms), and the
	// store looks its dedup id up among the session's entries stored
	// since instead of relying on the ten-minute window. Needs dedup_id.
	DedupSinceMs int64 `json:"dedup_since_ms,omitempty"`
	// DeferMeta lets the store write the session's meta (entry_count,
	// active_leaf, updated_at) up to its meta delay later, once for a
	// burst of appends: for a writer that keeps the session's path
	// itself. Readers see the entry at once either way.
	DeferMeta bool `json:"defer_meta,omitempty"`
}

// Validate checks the ids and the entry; exactly one of entry and message
// is set.
func (r AppendRequest) Validate() error {
	if err := validSessionID(r.SessionID); err != nil {
		return err
	}
	if err := validEntryRef("parent_id", r.ParentID, false); err != nil {
		return err
	}
	if err := validOptionalID("dedup_id", r.DedupID); err != nil {
		return err
	}
	if err := validDedupSince(r.DedupID, r.DedupSinceMs); err != nil {
		return err
	}
	if (r.Entry == nil) == (r.Message == nil) {
		return invalid("set exactly one of entry and message")
	}
	if r.Message != nil {
		if err := validNewMessage(r.Message); err != nil {
			return invalid("message: %v", err)
		}
		return nil
	}
	if err := r.Entry.validateNew(); err != nil {
		return invalid("entry: %v", err)
	}
	return nil
}

func (r AppendRequest) entries() []Entry {
	if r.Message != nil {
		return []Entry{MessageEntry(*r.Message)}
	}
	return []Entry{*r.Entry}
}

// AppendResponse is the answer of session::append.
type AppendResponse struct {
	EntryID string `json:"entry_id"`
}

// AppendBatchRequest is the request of session::append_batch: a chain of
// entries (or, as a shorthand, of messages), the first under parent_id
// (or the active leaf), each next under the one before.
type AppendBatchRequest struct {
	SessionID string          `json:"session_id"`
	ParentID  string          `json:"parent_id,omitempty"`
	Entries   []Entry         `json:"entries,omitempty"`
	Messages  []agent.Message `json:"messages,omitempty"`
	// DedupID makes a retried batch a no-op for ten minutes (entry i is
	// deduplicated as "<dedup_id>.<i>").
	DedupID string `json:"dedup_id,omitempty"`
	// DedupSinceMs: as [AppendRequest.DedupSinceMs], for the whole chain
	// (a first attempt that stored a prefix of it is completed).
	DedupSinceMs int64 `json:"dedup_since_ms,omitempty"`
	// DeferMeta: as [AppendRequest.DeferMeta].
	DeferMeta bool `json:"defer_meta,omitempty"`
}

// Validate checks the ids and every entry; exactly one of entries and
// messages is non-empty, with at most [MaxBatchEntries] items.
func (r AppendBatchRequest) Validate() error {
	if err := validSessionID(r.SessionID); err != nil {
		return err
	}
	if err := validEntryRef("parent_id", r.ParentID, false); err != nil {
		return err
	}
	if err := validOptionalID("dedup_id", r.DedupID); err != nil {
		return err
	}
	if err := validDedupSince(r.DedupID, r.DedupSinceMs); err != nil {
		return err
	}
	if (len(r.Entries) == 0) == (len(r.Messages) == 0) {
		return invalid("set exactly one of entries and messages, not empty")
	}
	if n := len(r.Entries) + len(r.Messages); n > MaxBatchEntries {
		return invalid("%d entries in one batch (at most %d)", n, MaxBatchEntries)
	}
	for i := range r.Messages {
		if err := validNewMessage(&r.Messages[i]); err != nil {
			return invalid("messages[%d]: %v", i, err)
		}
	}
	for i, e := range r.Entries {
		if err := e.validateNew(); err != nil {
			return invalid("entries[%d]: %v", i, err)
		}
	}
	return nil
}

func (r AppendBatchRequest) entries() []Entry {
	if len(r.Messages) == 0 {
		return r.Entries
	}
	out := make([]Entry, len(r.Messages))
	for i := range r.Messages {
		out[i] = MessageEntry(r.Messages[i])
	}
	return out
}

// AppendBatchResponse is the answer of session::append_batch.
type AppendBatchResponse struct {
	EntryIDs []string `json:"entry_ids"`
}

// ReadRequest names a path: the session and its leaf ([Store.Messages],
// [Store.Entries], [Store.ExportHTML]; the functions take it too, as the
// first page of their answers).
type ReadRequest struct {
	SessionID string `json:"session_id"`
	// Leaf is optional: empty reads the active path.
	Leaf string `json:"leaf,omitempty"`
}

// Validate checks the ids.
func (r ReadRequest) Validate() error {
	if err := validSessionID(r.SessionID); err != nil {
		return err
	}
	return validEntryRef("leaf", r.Leaf, false)
}

// MessagesRequest is the request of session::messages: a path, as
// [ReadRequest], and where to continue a truncated answer.
type MessagesRequest struct {
	SessionID string `json:"session_id"`
	// Leaf is optional: empty reads the active path. With After, it is
	// the leaf the truncated answer named, so that every page reads the
	// same path whatever the session's active leaf does meanwhile.
	Leaf string `json:"leaf,omitempty"`
	// After continues a truncated answer: the entry_id of the last
	// message received; the answer holds the messages after it.
	After string `json:"after,omitempty"`
}

// Validate checks the ids; After needs Leaf.
func (r MessagesRequest) Validate() error { return validPathPage(r.SessionID, r.Leaf, r.After) }

// validPathPage checks the request of one page of a path: the ids, and a
// leaf with every after (the pages of one answer read one path).
func validPathPage(sid, leaf, after string) error {
	if err := (ReadRequest{SessionID: sid, Leaf: leaf}).Validate(); err != nil {
		return err
	}
	if err := validEntryRef("after", after, false); err != nil {
		return err
	}
	if after != "" && leaf == "" {
		return invalid("after needs leaf: the leaf of the answer it continues")
	}
	return nil
}

// PathMessage is one model-facing message and the entry it comes from.
type PathMessage struct {
	EntryID string        `json:"entry_id"`
	Message agent.Message `json:"message"`
}

// PathStep is one entry of a path, for UIs.
type PathStep struct {
	EntryID string    `json:"entry_id"`
	Type    EntryType `json:"type"`
}

// MessagesResponse is the answer of session::messages.
type MessagesResponse struct {
	// Leaf is the path's leaf; empty when the session has no history.
	Leaf string `json:"leaf,omitempty"`
	// Messages is what the model sees, oldest first: with a compaction on
	// the path, its summary (as a user message) followed by the messages
	// from its first_kept_entry_id on.
	Messages []PathMessage `json:"messages"`
	// Path is every entry from the root to the leaf. Over the bus, it is
	// the newest of them that fit the server's max payload after the
	// messages, PathOmitted counting the older ones left out.
	Path []PathStep `json:"path"`
	// PathOmitted counts the oldest entries of the path left out of Path
	// (session::messages only; 0: Path is the whole path).
	PathOmitted int `json:"path_omitted,omitempty"`
	// Truncated is set when more messages follow than the server's max
	// payload lets one answer of session::messages hold: ask again with
	// Leaf and After the entry_id of the last message.
	Truncated bool `json:"truncated,omitempty"`
}

// EntriesRequest is the request of session::entries: a path, as
// [ReadRequest], and where to continue a truncated answer.
type EntriesRequest struct {
	SessionID string `json:"session_id"`
	// Leaf is optional: empty reads the active path. With After, it is
	// the leaf the truncated answer named.
	Leaf string `json:"leaf,omitempty"`
	// After continues a truncated answer: the id of the last entry
	// received; the answer holds the entries after it.
	After string `json:"after,omitempty"`
}

// Validate checks the ids; After needs Leaf.
func (r EntriesRequest) Validate() error { return validPathPage(r.SessionID, r.Leaf, r.After) }

// EntriesResponse is the answer of session::entries.
type EntriesResponse struct {
	// Leaf is the path's leaf; empty when the session has no history.
	Leaf string `json:"leaf,omitempty"`
	// Entries are the path's entries, root first (over the bus: those
	// after the request's After that fit the server's max payload).
	Entries []Entry `json:"entries"`
	// Truncated is set when more entries follow than the server's max
	// payload lets one answer of session::entries hold: ask again with
	// Leaf and After the id of the last entry.
	Truncated bool `json:"truncated,omitempty"`
}

// ForkRequest is the request of session::fork.
type ForkRequest struct {
	SessionID   string `json:"session_id"`
	FromEntryID string `json:"from_entry_id"`
	// NewSessionID is optional ("s_<nuid>" when empty, "<region>.s_<nuid>"
	// for a session homed in a region); an existing id is a conflict. A
	// fork shares its history, so it has the home region of the session
	// it forks.
	NewSessionID string `json:"new_session_id,omitempty"`
	// DisplayName defaults to the forked session's.
	DisplayName string `json:"display_name,omitempty"`
}

// Validate checks the ids and the display name.
func (r ForkRequest) Validate() error {
	if err := validSessionID(r.SessionID); err != nil {
		return err
	}
	if err := validEntryRef("from_entry_id", r.FromEntryID, true); err != nil {
		return err
	}
	if err := validForkID(r.SessionID, r.NewSessionID); err != nil {
		return err
	}
	return validDisplayName(r.DisplayName)
}

// CloneRequest is the request of session::clone: a fork at the leaf.
type CloneRequest struct {
	SessionID string `json:"session_id"`
	// Leaf is optional: empty clones the active path.
	Leaf string `json:"leaf,omitempty"`
	// NewSessionID is optional, as for a fork.
	NewSessionID string `json:"new_session_id,omitempty"`
	DisplayName  string `json:"display_name,omitempty"`
}

// Validate checks the ids and the display name.
func (r CloneRequest) Validate() error {
	if err := validSessionID(r.SessionID); err != nil {
		return err
	}
	if err := validEntryRef("leaf", r.Leaf, false); err != nil {
		return err
	}
	if err := validForkID(r.SessionID, r.NewSessionID); err != nil {
		return err
	}
	return validDisplayName(r.DisplayName)
}

// TreeNode is one entry of session::tree.
type TreeNode struct {
	EntryID   string    `json:"entry_id"`
	ParentID  string    `json:"parent_id,omitempty"`
	Type      EntryType `json:"type"`
	Timestamp int64     `json:"timestamp"`
	// Summary is one line of the entry's content.
	Summary string `json:"summary"`
	// ChildrenCount counts the node's children in this session's view.
	ChildrenCount int `json:"children_count"`
	// SessionID is the session that stores the entry: another one for
	// the history a fork shares.
	SessionID string `json:"session_id"`
}

// TreeRequest is the request of session::tree: the session, and where
// to continue a truncated answer.
type TreeRequest struct {
	SessionID string `json:"session_id"`
	// After continues a truncated answer: the entry_id of the last node
	// received; the answer holds the nodes after it.
	After string `json:"after,omitempty"`
}

// Validate checks the ids.
func (r TreeRequest) Validate() error {
	if err := validSessionID(r.SessionID); err != nil {
		return err
	}
	return validEntryRef("after", r.After, false)
}

// TreeResponse is the answer of session::tree: the shared history of a
// fork (root to fork point) then the session's own entries, oldest first.
type TreeResponse struct {
	SessionID string `json:"session_id"`
	// Nodes are the tree's entries, oldest first (over the bus: those
	// after the request's After that fit the server's max payload).
	Nodes      []TreeNode `json:"nodes"`
	ActiveLeaf string     `json:"active_leaf,omitempty"`
	// Truncated is set when more nodes follow than the server's max
	// payload lets one answer of session::tree hold: ask again with
	// After the entry_id of the last node.
	Truncated bool `json:"truncated,omitempty"`
}

// ListRequest is the request of session::list.
type ListRequest struct {
	// Limit is the page size: 1 to [MaxListLimit], default
	// [DefaultListLimit].
	Limit int `json:"limit,omitempty"`
	// Cursor is the next_cursor of the previous page.
	Cursor string `json:"cursor,omitempty"`
}

// Validate checks the limit and the cursor.
func (r ListRequest) Validate() error {
	if r.Limit < 0 || r.Limit > MaxListLimit {
		return invalid("limit %d not in [0, %d]", r.Limit, MaxListLimit)
	}
	if r.Cursor != "" {
		if _, _, err := parseCursor(r.Cursor); err != nil {
			return err
		}
	}
	return nil
}

// ListResponse is the answer of session::list: sessions by updated_at,
// newest first.
type ListResponse struct {
	// Sessions are at most the request's limit of sessions; over the bus,
	// fewer when that many would outgrow the server's max payload.
	Sessions []Meta `json:"sessions"`
	// NextCursor is set when more sessions follow.
	NextCursor string `json:"next_cursor,omitempty"`
}

// SetActiveLeafRequest is the request of session::set_active_leaf.
type SetActiveLeafRequest struct {
	SessionID string `json:"session_id"`
	EntryID   string `json:"entry_id"`
}

// Validate checks the ids.
func (r SetActiveLeafRequest) Validate() error {
	if err := validSessionID(r.SessionID); err != nil {
		return err
	}
	return validEntryRef("entry_id", r.EntryID, true)
}

// SetActiveLeafResponse is the answer of session::set_active_leaf.
type SetActiveLeafResponse struct {
	SessionID  string `json:"session_id"`
	ActiveLeaf string `json:"active_leaf"`
}

// ExportHTMLRequest is the request of session::export_html: a path, as
// [ReadRequest], and where to continue a truncated answer.
type ExportHTMLRequest struct {
	SessionID string `json:"session_id"`
	// Leaf is optional: empty exports the active path. With After, it is
	// the leaf the truncated answer named.
	Leaf string `json:"leaf,omitempty"`
	// After continues a truncated answer: its last_entry_id; the answer
	// holds the rest of the page from the entry after it.
	After string `json:"after,omitempty"`
}

// Validate checks the ids; After needs Leaf.
func (r ExportHTMLRequest) Validate() error { return validPathPage(r.SessionID, r.Leaf, r.After) }

// ExportHTMLResponse is the answer of session::export_html.
type ExportHTMLResponse struct {
	// HTML is the page; over the bus, a part of it: the parts of a
	// truncated export, concatenated in order, are the whole page.
	HTML string `json:"html"`
	// Leaf is the path's leaf; empty when the session has no history.
	Leaf string `json:"leaf,omitempty"`
	// LastEntryID is the last entry HTML renders.
	LastEntryID string `json:"last_entry_id,omitempty"`
	// Truncated is set when the rest of the page is more than the
	// server's max payload lets one answer of session::export_html hold:
	// ask again with Leaf and After LastEntryID for the next part.
	Truncated bool `json:"truncated,omitempty"`
}

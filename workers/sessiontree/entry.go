package sessiontree

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent"
)

// EntryType names the kind of an [Entry].
type EntryType string

// Entry types.
const (
	// TypeMessage carries one agent.Message of the transcript.
	TypeMessage EntryType = "message"
	// TypeCompaction replaces the history before it (up to
	// first_kept_entry_id) with a summary in the model-facing messages.
	TypeCompaction EntryType = "compaction"
	// TypeBranchSummary summarises a branch the conversation left (from
	// from_entry_id); the model sees it as a user message.
	TypeBranchSummary EntryType = "branch_summary"
	// TypeCustom carries application data the model never sees.
	TypeCustom EntryType = "custom"
)

// Valid reports whether t is one of the known entry types.
func (t EntryType) Valid() bool {
	return t == TypeMessage || t == TypeCompaction || t == TypeBranchSummary || t == TypeCustom
}

// Limits of an entry.
const (
	// DefaultMaxEntrySize bounds one stored entry (encoded); see
	// [WithMaxEntrySize].
	DefaultMaxEntrySize = 256 << 10
	// MaxCustomTypeLen bounds custom_type.
	MaxCustomTypeLen = 128
)

// Entry is one node of a session tree. ID and ParentID are assigned by the
// store: a new entry is appended under a parent that already exists, so
// the tree can never hold a cycle. Which payload fields are set depends on
// Type:
//
//   - message: Message.
//   - compaction: Summary, FirstKeptEntryID (optional: empty keeps nothing
//     before the compaction), TokensBefore.
//   - branch_summary: Summary, FromEntryID (the leaf of the branch that was
//     left).
//   - custom: CustomType, Data (any JSON value).
type Entry struct {
	// ID is the entry id ([FormatEntryID]); empty in an append request.
	ID string `json:"id,omitempty"`
	// ParentID is the parent's id; empty for the root, and in an append
	// request (the request names the parent).
	ParentID string `json:"parent_id,omitempty"`
	// Type says which payload the entry carries.
	Type EntryType `json:"type"`
	// Timestamp is Unix milliseconds; zero in a request means "now".
	Timestamp int64 `json:"timestamp,omitempty"`

	Message *agent.Message `json:"message,omitempty"`

	Summary          string `json:"summary,omitempty"`
	FirstKeptEntryID string `json:"first_kept_entry_id,omitempty"`
	TokensBefore     int64  `json:"tokens_before,omitempty"`
	FromEntryID      string `json:"from_entry_id,omitempty"`

	CustomType string `json:"custom_type,omitempty"`
	Data       any    `json:"data,omitempty"`
}

// MessageEntry returns a message entry carrying m.
func MessageEntry(m agent.Message) Entry { return Entry{Type: TypeMessage, Message: &m} }

// CompactionEntry returns a compaction entry: summary replaces the history
// before firstKept (an entry id on the path, or "" for none).
func CompactionEntry(summary, firstKept string, tokensBefore int64) Entry {
	return Entry{Type: TypeCompaction, Summary: summary, FirstKeptEntryID: firstKept, TokensBefore: tokensBefore}
}

// validateNew checks an entry of an append request: a known type, the
// payload fields its type needs and no others, valid ids and UTF-8. It
// does not look at the store (the ids it names are checked there).
func (e Entry) validateNew() error {
	if e.ID != "" {
		return fmt.Errorf("id is assigned by the store: leave it empty")
	}
	if e.ParentID != "" {
		return fmt.Errorf("parent_id belongs on the request, not on the entry")
	}
	if e.Timestamp < 0 {
		return fmt.Errorf("negative timestamp")
	}
	if err := e.validatePayload(); err != nil {
		return err
	}
	// An entry is JSON (a custom entry's data is "any JSON value"), but a
	// msgpack request can carry NaN and infinities: stored, such an entry
	// could never be sent to a JSON caller (encoding/json refuses them),
	// and every session::entries (and session::messages, for a message)
	// over JSON of a path through it failed with internal, for good. A
	// message's are refused by agent.Message.Validate.
	if s := agent.NonFinite(e.Data); s != "" {
		return fmt.Errorf("data holds %s, which JSON cannot carry", s)
	}
	return nil
}

// validNewMessage checks the message of an append request: an entry of
// its own (agent.Message.Validate, which refuses NaN and infinities).
func validNewMessage(m *agent.Message) error { return m.Validate() }

// validatePayload checks the type and payload fields.
func (e Entry) validatePayload() error {
	var extra []string
	if e.Message != nil && e.Type != TypeMessage {
		extra = append(extra, "message")
	}
	if e.Summary != "" && e.Type != TypeCompaction && e.Type != TypeBranchSummary {
		extra = append(extra, "summary")
	}
	if (e.FirstKeptEntryID != "" || e.TokensBefore != 0) && e.Type != TypeCompaction {
		extra = append(extra, "first_kept_entry_id/tokens_before")
	}
	if e.FromEntryID != "" && e.Type != TypeBranchSummary {
		extra = append(extra, "from_entry_id")
	}
	if (e.CustomType != "" || e.Data != nil) && e.Type != TypeCustom {
		extra = append(extra, "custom_type/data")
	}
	if len(extra) > 0 {
		return fmt.Errorf("a %s entry cannot carry %v", e.Type, extra)
	}
	switch e.Type {
	case TypeMessage:
		if e.Message == nil {
			return fmt.Errorf("message entry has no message")
		}
		return e.Message.Validate()
	case TypeCompaction:
		if err := validText("summary", e.Summary); err != nil {
			return err
		}
		if e.TokensBefore < 0 {
			return fmt.Errorf("negative tokens_before")
		}
		if e.FirstKeptEntryID != "" {
			if _, err := ParseEntryID(e.FirstKeptEntryID); err != nil {
				return fmt.Errorf("first_kept_entry_id: %w", err)
			}
		}
		return nil
	case TypeBranchSummary:
		if err := validText("summary", e.Summary); err != nil {
			return err
		}
		if _, err := ParseEntryID(e.FromEntryID); err != nil {
			return fmt.Errorf("from_entry_id: %w", err)
		}
		return nil
	case TypeCustom:
		return validCustomType(e.CustomType)
	case "":
		return fmt.Errorf("entry has no type")
	default:
		return fmt.Errorf("unknown entry type %q", e.Type)
	}
}

func validText(kind, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", kind)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", kind)
	}
	return nil
}

func validCustomType(s string) error {
	if s == "" {
		return fmt.Errorf("custom entry has no custom_type")
	}
	if len(s) > MaxCustomTypeLen {
		return fmt.Errorf("custom_type is longer than %d bytes", MaxCustomTypeLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("custom_type is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("custom_type %q contains whitespace or a control character", s)
		}
	}
	return nil
}

// entryIDPrefix starts every entry id, so that ids read as entries.
const entryIDPrefix = 'e'

// FormatEntryID is the id of the entry stored at stream sequence seq:
// "e" followed by seq in base 36 ("e1", "e2s"). Ids are short, unique in
// the store, valid ids (subjects.ValidateID) and ordered like the
// entries' sequences when compared as (length, string).
func FormatEntryID(seq uint64) string {
	b := make([]byte, 0, 14)
	b = append(b, entryIDPrefix)
	return string(strconv.AppendUint(b, seq, 36))
}

// ParseEntryID is the inverse of [FormatEntryID]: it accepts only the
// canonical form (lower case, no leading zero, seq ≥ 1), so every id names
// one entry and formats back to itself.
func ParseEntryID(id string) (uint64, error) {
	if len(id) < 2 || len(id) > 14 || id[0] != entryIDPrefix || id[1] == '0' {
		return 0, fmt.Errorf("%w: %q", ErrInvalidEntryID, id)
	}
	for i := 1; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') {
			return 0, fmt.Errorf("%w: %q", ErrInvalidEntryID, id)
		}
	}
	seq, err := strconv.ParseUint(id[1:], 36, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("%w: %q", ErrInvalidEntryID, id)
	}
	return seq, nil
}

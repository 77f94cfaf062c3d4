package sessiontree

import (
	"fmt"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// recordVersion is the version of the stored entry format.
const recordVersion = 1

// record is an entry as stored in [EntryStream] (msgpack): the entry's
// fields without its id (the stream sequence is the id), plus the
// bookkeeping that makes appends O(1) and path reads proportional to the
// path:
//
//   - Depth: the number of ancestors (0 for the root), across forks.
//   - N: the entry's ordinal on its session's subject (1, 2, …): the
//     session's own entry count once the entry is appended.
//   - Run, RunDepth, RunParent: a run is a chain of entries stored one
//     after the other on one session subject, each the parent of the next.
//     An entry that starts a run has Run 0; the others name the run's
//     first sequence, its depth and its parent. One batch direct get reads
//     a whole run, so a path costs two round trips per run, not one per
//     entry.
type record struct {
	V         int            `json:"v"`
	ParentID  string         `json:"parent_id,omitempty"`
	Type      EntryType      `json:"type"`
	Timestamp int64          `json:"timestamp"`
	Message   *agent.Message `json:"message,omitempty"`

	Summary          string `json:"summary,omitempty"`
	FirstKeptEntryID string `json:"first_kept_entry_id,omitempty"`
	TokensBefore     int64  `json:"tokens_before,omitempty"`
	FromEntryID      string `json:"from_entry_id,omitempty"`
	CustomType       string `json:"custom_type,omitempty"`
	Data             any    `json:"data,omitempty"`

	Depth     uint64 `json:"depth"`
	N         uint64 `json:"n"`
	Run       uint64 `json:"run,omitempty"`
	RunDepth  uint64 `json:"run_depth,omitempty"`
	RunParent string `json:"run_parent,omitempty"`
}

func newRecord(e Entry) record {
	return record{
		V: recordVersion, Type: e.Type, Timestamp: e.Timestamp, Message: e.Message,
		Summary: e.Summary, FirstKeptEntryID: e.FirstKeptEntryID, TokensBefore: e.TokensBefore,
		FromEntryID: e.FromEntryID, CustomType: e.CustomType, Data: e.Data,
	}
}

// entry is the public view of r stored at seq.
func (r *record) entry(seq uint64) Entry {
	return Entry{
		ID: FormatEntryID(seq), ParentID: r.ParentID, Type: r.Type, Timestamp: r.Timestamp,
		Message: r.Message, Summary: r.Summary, FirstKeptEntryID: r.FirstKeptEntryID,
		TokensBefore: r.TokensBefore, FromEntryID: r.FromEntryID, CustomType: r.CustomType, Data: r.Data,
	}
}

// encodeRecord encodes r.
func encodeRecord(r *record) ([]byte, error) {
	b, err := wire.Msgpack.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptRecord, err)
	}
	return b, nil
}

// decodeRecord decodes a stored entry stored at seq and checks the
// invariants a reader relies on: a known version and type, a canonical
// parent id older than the entry, depth 0 exactly for the root, and a run
// that starts before the entry at a smaller depth.
func decodeRecord(data []byte, seq uint64) (record, error) {
	var r record
	err := decodeRecordInto(&r, data, seq)
	return r, err
}

// decodeRecordInto is decodeRecord into r (a slot of a slice, so a path
// read allocates no record of its own).
func decodeRecordInto(r *record, data []byte, seq uint64) error {
	if err := wire.Msgpack.Unmarshal(data, r); err != nil {
		*r = record{}
		return fmt.Errorf("%w: entry %s (sequence %d of %s) does not decode; another client may have published it: %v",
			ErrCorruptRecord, FormatEntryID(seq), seq, subjects.SessionEntryStream, err)
	}
	if err := r.check(seq); err != nil {
		*r = record{}
		return err
	}
	return nil
}

func (r *record) check(seq uint64) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: entry %s: %s", ErrCorruptRecord, FormatEntryID(seq), fmt.Sprintf(format, args...))
	}
	if r.V != recordVersion {
		return bad("unknown version %d", r.V)
	}
	if err := r.entry(seq).validatePayload(); err != nil {
		return bad("%v", err)
	}
	if r.N == 0 {
		return bad("no ordinal")
	}
	if r.ParentID == "" {
		if r.Depth != 0 || r.Run != 0 {
			return bad("a root with depth %d or a run", r.Depth)
		}
		return nil
	}
	p, err := ParseEntryID(r.ParentID)
	if err != nil {
		return bad("parent: %v", err)
	}
	if p >= seq {
		return bad("parent %s is not older", r.ParentID)
	}
	if r.Depth == 0 {
		return bad("depth 0 with a parent")
	}
	if r.Run != 0 {
		if r.Run >= seq || r.RunDepth >= r.Depth || uint64(seq-r.Run) < r.Depth-r.RunDepth {
			return bad("run %d at depth %d does not lead to depth %d", r.Run, r.RunDepth, r.Depth)
		}
		if r.RunParent == "" && r.RunDepth != 0 || r.RunParent != "" && r.RunDepth == 0 {
			return bad("run parent %q at run depth %d", r.RunParent, r.RunDepth)
		}
		if r.RunParent != "" {
			rp, err := ParseEntryID(r.RunParent)
			if err != nil || rp >= r.Run {
				return bad("run parent %q", r.RunParent)
			}
		}
	}
	return nil
}

// node is a record with its place in the stream.
type node struct {
	seq uint64
	sid string
	rec record
	// size is the bytes of the encoded record when it was read (0 for
	// an entry the store appended).
	size int
}

func (n *node) id() string { return FormatEntryID(n.seq) }

// runStart is the sequence of the first entry of n's run.
func (n *node) runStart() uint64 {
	if n.rec.Run == 0 {
		return n.seq
	}
	return n.rec.Run
}

// runDepth is the depth of the first entry of n's run.
func (n *node) runDepth() uint64 {
	if n.rec.Run == 0 {
		return n.rec.Depth
	}
	return n.rec.RunDepth
}

// runParent is the parent of the first entry of n's run ("" at the root).
func (n *node) runParent() string {
	if n.rec.Run == 0 {
		return n.rec.ParentID
	}
	return n.rec.RunParent
}

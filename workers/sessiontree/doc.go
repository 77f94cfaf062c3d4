// Package sessiontree is the session worker: the "session" module, which
// stores every session as a durable, branching tree of entries on
// JetStream, so that a conversation can be resumed, rewound, branched,
// forked and cloned.
//
// # Entries
//
// An [Entry] is {id, parent_id, type, timestamp, ...}: a message (one
// agent.Message), a compaction {summary, first_kept_entry_id,
// tokens_before}, a branch_summary {summary, from_entry_id} or a custom
// entry {custom_type, data}. The store assigns ids: an entry's id is its
// stream sequence in base 36 behind an "e" ([FormatEntryID]: "e1", "e2s"),
// short, unique, a valid subject token. A new entry goes under a parent
// that already exists (in the session, or in the history it was forked
// from), so a parent is always older than its child and the tree can hold
// no cycle: self-parents and cycles cannot even be named.
//
// # Functions
//
//   - session::create {display_name?, session_id?} → {session_id}
//     (conflict when session_id exists).
//   - session::ensure {session_id, display_name?} → {session_id, created}.
//     created is true only for a session with no history: one whose meta
//     is missing but whose entries are stored is rebuilt (see "Crash
//     safety") and answers false.
//   - session::get {session_id} → [Meta].
//   - session::append {session_id, parent_id?, entry | message, dedup_id?,
//     dedup_since_ms?} → {entry_id}. The parent defaults to the active
//     leaf (the root for an empty session); the new entry becomes the
//     active leaf.
//   - session::append_batch {session_id, parent_id?, entries[] |
//     messages[], dedup_id?, dedup_since_ms?} → {entry_ids}: a chain, the
//     last becomes the active leaf.
//     A dedup_id makes a retry answer the first attempt's entries for as
//     long as the entry stream's duplicate window (ten minutes) keeps the
//     id. A caller that may retry later (a node replaying a dead
//     activation's transcript appends after a night switched off) also
//     gives dedup_since_ms, the earliest time the first attempt can have
//     been stored: the store then reads the session's entries stored since
//     (a batch direct get per thousand entries, headers included), answers
//     those carrying the dedup id and completes a chain the first attempt
//     stored only a prefix of. Exact for any delay, at the cost of that
//     read, which only replays pay.
//   - session::messages {session_id, leaf?, after?} → {messages:
//     [{entry_id, message}], path: [{entry_id, type}], leaf,
//     path_omitted?, truncated?}: what the model sees on the path from the
//     root to leaf (default: the active leaf), oldest first. The last
//     compaction on the path wins: its summary comes first as a user
//     message ([CompactionPrefix]), then the messages from its
//     first_kept_entry_id on; compaction entries never appear verbatim,
//     branch summaries are user messages ([BranchSummaryPrefix]), custom
//     entries are left out. An answer never outgrows the server's max
//     payload: the messages come in pages, truncated set while more
//     follow, the next asked with leaf (the answer's) and after (the
//     entry_id of the last message received); path holds the newest
//     entries of the path that fit after the messages, path_omitted
//     counting the older ones (a compacted path is mostly those).
//     [Store.Messages] answers the whole view.
//   - session::entries {session_id, leaf?, after?} → {entries, leaf,
//     truncated?}: the raw path, root first, in pages as messages are
//     (the next asked with leaf and after, the id of the last entry
//     received).
//   - session::fork {session_id, from_entry_id, new_session_id?,
//     display_name?} → {session_id}: a new session whose history is the
//     path up to and including from_entry_id, shared and not copied. It
//     has the home region of the session it forks (see "Session homes").
//   - session::clone {session_id, leaf?, new_session_id?, display_name?} →
//     {session_id}: a fork at the leaf.
//   - session::tree {session_id, after?} → {nodes: [{entry_id, parent_id,
//     type, timestamp, summary, children_count, session_id}],
//     active_leaf, truncated?}, in pages (the next asked with after, the
//     entry_id of the last node received; nodes appended meanwhile come
//     on later pages, child counts are those of the page's read). The
//     tree is read one line a node, never holding the entries.
//   - session::list {limit?, cursor?} → {sessions, next_cursor?}: one page
//     of [Meta] values, most recently updated first, of every home region;
//     fewer than limit when that many would outgrow the max payload.
//   - session::set_active_leaf {session_id, entry_id} → {session_id,
//     active_leaf}.
//   - session::export_html {session_id, leaf?, after?} → {html, leaf,
//     last_entry_id, truncated?}: one self-contained page (inline CSS,
//     html/template escaping). A page larger than an answer comes in
//     parts, whole entries each, the next asked with leaf and after =
//     last_entry_id: the parts concatenated are the page, byte for byte.
//     An entry too large for an answer of its own comes with its texts
//     cut and its images left out, with a note saying how many bytes.
//
// Errors: invalid_payload for bad ids, invalid entries (one carrying a
// NaN or an infinity, which a msgpack request can but JSON cannot), an entry over the
// size cap (256 KiB encoded, [WithMaxEntrySize]) or whose JSON would not
// fit an answer of its own (the max payload less 2 KiB; JSON writes a
// control character in 6 bytes, msgpack in 1), a compaction whose
// first_kept_entry_id is not on its path, a fork (clone) into another
// home region, or an after that is not an item of the answer it
// continues or comes without leaf (session::tree takes no leaf);
// not_found for an unknown session, a session whose home region has no
// stores (engine.ErrUnknownRegion: nothing is written), or
// an entry that is not in the session's history (unknown, or of an
// unrelated session); conflict for a create (fork, clone) of an existing
// id; unavailable, timeout when JetStream does not answer; internal for a
// stored record that does not decode or breaks the tree (written around
// the store).
//
// Replies are bounded by the server's max payload (1 MiB by default):
// an answer that fits is encoded once and sent whole; a longer one is cut
// after the items that fit (at least one) and says so (truncated, or a
// next_cursor), as above. A page of messages, entries or export_html that says
// more follow keeps its path in the store for a minute, by leaf (the
// path to an entry never changes), and the next page, which names that
// leaf and an after, reads no path: reading every page reads the path
// once (once per replica that serves a page), not once per page. Paths
// are kept within 64 MiB in all (pathcache.go). A page of session::tree
// that says more follow keeps the session's tree likewise, by session
// (one line a node, within 32 MiB in all: treeindex.go): the next page
// reads only the entries appended since (the meta's last_seq says
// which). The [Store] methods answer whole, with no such bound.
//
// session::inbox_push and session::inbox_drain are the orchestrator's.
//
// # Storage layout
//
// Stream [EntryStream] ("III_SESSION_ENTRIES", [EntryStreamConfig]; a
// region's copy for the sessions homed there, see "Session homes"):
// subjects "iii.session.entries.<session id>", one message per entry, the
// entry as msgpack (a record: the entry's fields without its id, plus
// bookkeeping). Limits retention, direct get allowed, single deletes
// denied, a ten-minute dedup window for dedup_id.
//
// KV bucket [MetaBucket] ("iii-sessions", [MetaBucketConfig]; a region's
// copy likewise): key the session id, value the JSON [Meta]:
//
//	{"session_id": "s1", "display_name": "…", "created_at": 1767225600000,
//	  "updated_at": 1767225612000, "active_leaf": "e4k", "entry_count": 12,
//	  "forked_from": {"session_id": "s0", "entry_id": "e2s"},
//	  "summary": "fix the failing parser test", "last_seq": 164}
//
// An append costs a meta read, a direct get of the parent, one publish
// and a meta compare-and-set on the revision it read (four round trips);
// it never reads the session's history. The store keeps the entries it
// appended last and the metas it read or wrote last, and watches the
// meta bucket (new writes, headers only) to drop a cached meta as soon as
// another write passes it: the next append to a conversation then reads
// neither (two round trips). A meta cached in the watch's lag is one read
// a moment earlier: a missed append fails the publish's expectation and
// the store reads again. The watched bucket is checked every 5 s: one
// deleted and created again (its revisions start over, and the old watch
// stays silent) empties the cache, which then follows the new bucket.
// An append with defer_meta leaves the meta
// write for later, one per burst of appends (deferred.go; the store's own
// reads and appends see it at once, other stores repair it as below),
// and costs one round trip. A fork writes
// one meta and no entry: reading its path walks into the session it was
// forked from.
//
// A path is read run by run. A run is a chain of entries stored one after
// the other on one session's subject, each the parent of the next (a
// linear conversation is one run; a branch starts a new one). Each record
// carries its depth and its run's first sequence, depth and parent, so
// one batch direct get reads a whole run and a path costs two round trips
// per run (a direct get of its last entry, a batch for the rest; one more
// batch per 32 MiB of a bigger run), reading only the path's entries
// however big the session is. Whether
// an entry is an ancestor of another (a fork's inherited history, a
// compaction's first kept entry) is decided the same way, one direct get
// per run.
//
// # Session homes
//
// A session id may name its home region, "<region>.<name>" (one dot; see
// subjects.ValidateSessionID). Stream and bucket are per-session stores
// (docs/REGIONS.md): the primary copies above hold the sessions with a
// plain id (the stream's subjects are "iii.session.entries.*", one
// token), and each region that runs iii nodes (engine.WithRegion) has its
// own copies, placed in its cluster, for the sessions homed there:
//
//	session "s1"    entries III_SESSION_ENTRIES        on iii.session.entries.s1
//	                meta    iii-sessions               key s1
//	session "eu.s1" entries III_SESSION_ENTRIES_AT_eu  on iii.session.entries.eu.s1
//	                meta    iii-sessions-at-eu         key eu.s1
//
// Subjects and keys keep their form (prefix + the whole id); a regional
// id's subject has one token more, which only its region's copy
// captures. Every read and write of a session goes to its copies
// (engine.Engine.SessionStream and SessionKV); a session of a region
// without them is not_found, and nothing is written. Entry ids are sequences of one copy, so a session's
// whole history stays in one: a fork or clone has the home region of the
// session it forks (a default new id is "<region>.s_<nuid>"), and an
// entry id names an entry of the copy of the session it is given with.
// session::list reads every copy (engine.Engine.SessionRegions).
//
// # Concurrency
//
// Every publish of an entry carries Nats-Expected-Last-Subject-Sequence:
// the meta's last_seq. Appends to one session are thereby serialized by
// JetStream: each entry knows its ordinal (entry_count) and whether it
// extends its parent's run. A writer that loses the race refreshes the
// meta and publishes again, so concurrent appends all land; one without
// parent_id then goes under the refreshed active leaf (the entry that won),
// so concurrent writers to the active leaf make a chain, not siblings.
// The meta is updated by compare-and-set with retries; the active leaf is
// last writer wins: the newest entry, or a set_active_leaf that comes
// after it.
//
// # Crash safety
//
// An entry is durable once append returns: its publish is acknowledged
// before the meta is touched. The meta is a cache of the stream. A writer
// that stops between publishing an entry and updating the meta (a crash, a
// lost connection) leaves a meta whose last_seq is behind the session's
// subject; the tree itself is valid, since the entry's parent existed.
// Repair rule: whoever next reads the session's meta through the store
// (every read, ensure, set_active_leaf, clone) or appends to it (its
// publish expectation fails) reads the newest entry on the subject and,
// when its sequence is above last_seq, folds it in: last_seq and
// entry_count from that entry, the active leaf moves to it (the append
// completes as if it had not been interrupted), and the summary is filled
// if empty. A batch interrupted in the middle leaves a shorter chain,
// folded the same way; a retry with its dedup_id completes it. A meta
// that is missing (deleted with `nats kv del`, the repair of one that does
// not decode) is rebuilt the same way by the next read, ensure or append
// of the session, from its newest entry; a session with no entry stays
// unknown (an ensure creates it anew), and a fork loses its forked_from.
// Meanwhile the session still exists: a create, fork or clone into its id
// is a conflict (one direct get of its subject when the caller names the
// new id).
//
// # Foreign messages
//
// A message another client publishes on a session's entry subject that
// is not an entry (it does not decode, or breaks an entry's rules) is
// passed over and logged at warn: the next reader or appender that finds
// it newest on the subject folds in any entry stored before it and sets
// the meta's last_seq past it, so appends go on under the active leaf;
// scans (tree, entries, export, dedup lookups) skip it; naming its id
// as an entry is not_found. Runs never contain one: an entry extends
// its parent's run only when the parent is the last message on the
// subject.
//
// # Lifecycle
//
//  1. New: the registry builds a [Worker]; embedders use [NewWorker].
//  2. Provision: the settings "max_entry_size" (bytes) and "meta_delay"
//     (a duration); any other is an error.
//  3. Start: open (create) the stream and the bucket ([Open]): the
//     primary copies and, on a node with a region, that region's; then
//     register the functions on the engine worker "session".
//  4. Close: stop the endpoints and write the deferred metas. The stream
//     and the bucket stay.
//
// # Example
//
//	w := sessiontree.NewWorker()
//	if err := w.Start(ctx, e); err != nil {
//		return err
//	}
//	defer w.Close(ctx)
//	s, _ := engine.Call[sessiontree.CreateResponse](ctx, e, sessiontree.CreateFunction, sessiontree.CreateRequest{})
//	msg := agent.UserText("hello", 0)
//	a, _ := engine.Call[sessiontree.AppendResponse](ctx, e, sessiontree.AppendFunction,
//		sessiontree.AppendRequest{SessionID: s.SessionID, Message: &msg})
//	f, _ := engine.Call[sessiontree.CreateResponse](ctx, e, sessiontree.ForkFunction,
//		sessiontree.ForkRequest{SessionID: s.SessionID, FromEntryID: a.EntryID})
//	_ = f.SessionID // its history is "hello"; what it appends stays its own
package sessiontree

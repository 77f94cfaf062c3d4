package sessiontree

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/subjects"
)

// NATS names of the session tree (defined in subjects/names.go).
const (
	// EntryStream keeps every entry of every session, one stream message
	// per entry, on the subject [EntrySubjectPrefix] + session id. It is a
	// per-session stream: this primary copy holds the sessions with a
	// plain id, the copy "III_SESSION_ENTRIES_AT_<region>"
	// (subjects.RegionalStream) those homed in region ("<region>.<name>").
	// The stream sequence of an entry is its identity ([FormatEntryID])
	// within its copy.
	EntryStream = subjects.SessionEntryStream
	// EntrySubjectPrefix prefixes a session's entry subject
	// ("iii.session.entries.<session id>").
	EntrySubjectPrefix = subjects.SessionEntrySubjectPrefix
	// MetaBucket holds one [Meta] per session (key = session id, JSON
	// value), changed by compare-and-set. It is a per-session bucket: a
	// session homed in region has its key in the copy
	// "iii-sessions-at-<region>" (subjects.RegionalBucket).
	MetaBucket = subjects.SessionsBucket
)

// Function ids the worker serves. session::inbox_push and
// session::inbox_drain belong to the orchestrator.
const (
	CreateFunction        = "session::create"
	EnsureFunction        = "session::ensure"
	GetFunction           = "session::get"
	AppendFunction        = "session::append"
	AppendBatchFunction   = "session::append_batch"
	MessagesFunction      = "session::messages"
	EntriesFunction       = "session::entries"
	ForkFunction          = "session::fork"
	CloneFunction         = "session::clone"
	TreeFunction          = "session::tree"
	ListFunction          = "session::list"
	SetActiveLeafFunction = "session::set_active_leaf"
	ExportHTMLFunction    = "session::export_html"
)

// EntrySubject is the entry subject of session sid: prefix + the whole id
// ("iii.session.entries.eu.s1" for a session "eu.s1").
func EntrySubject(sid string) (string, error) { return subjects.SessionEntrySubject(sid) }

// dedupWindow is how long a dedup_id makes a repeated append a no-op.
const dedupWindow = 10 * time.Minute

// EntryStreamConfig is the configuration of [EntryStream]'s primary copy
// (a region's copy differs in name, subjects and placement,
// engine.EnsureSessionStream): subjects "iii.session.entries.*", limits
// retention (entries are kept forever), file storage, direct get on (the
// path is read with direct and batch direct gets), single-message deletes
// refused (a hole would cut every path through it), and a dedup window
// for append retries.
func EntryStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        EntryStream,
		Description: "iii session trees: one message per entry, subject per session",
		Subjects:    []string{subjects.SessionSubjects(EntrySubjectPrefix, "")},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		AllowDirect: true,
		DenyDelete:  true,
		Duplicates:  dedupWindow,
	}
}

// MetaBucketConfig is the configuration of [MetaBucket]'s primary copy
// (engine.EnsureSessionKV makes the region's): history 1, file storage.
func MetaBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      MetaBucket,
		Description: "iii session metadata: active leaf, counts, fork origin",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}
}

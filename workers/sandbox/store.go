package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/iii-on-nats/iii/subjects"

	"github.com/nats-io/nats.go/jetstream"
)

// SandboxesBucket is the KV bucket of sandbox records, one per session
// under "session.<session id>" (the lead may move the name to subjects/).
const SandboxesBucket = subjects.SandboxesBucket

// BucketConfig is the configuration of [SandboxesBucket]: history 1,
// file storage, replicas as the engine's.
func BucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      SandboxesBucket,
		Description: "iii sandboxes: one record per session's live sandbox",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// recordKey is the KV key of session sid's sandbox record.
func recordKey(sid string) string { return "session." + sid }

// decodeRecord decodes a record and checks it names a sandbox of its own
// session.
func decodeRecord(b []byte) (Sandbox, error) {
	var rec Sandbox
	if err := json.Unmarshal(b, &rec); err != nil {
		return Sandbox{}, fmt.Errorf("%w: does not decode: %v", ErrBadRecord, err)
	}
	sid, err := parseSandboxID(rec.SandboxID)
	if err != nil {
		return Sandbox{}, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if sid != rec.SessionID {
		return Sandbox{}, fmt.Errorf("%w: %s names session %q", ErrBadRecord, rec.SandboxID, rec.SessionID)
	}
	return rec, nil
}

// getRecord reads session sid's record; ok is false when there is none.
// A record that does not decode is an error wrapping [ErrBadRecord], with
// its revision, so that it can be replaced or deleted by compare-and-set.
func getRecord(ctx context.Context, kv jetstream.KeyValue, sid string) (rec Sandbox, rev uint64, ok bool, err error) {
	ent, err := kv.Get(ctx, recordKey(sid))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Sandbox{}, 0, false, nil
	}
	if err != nil {
		return Sandbox{}, 0, false, err
	}
	rec, err = decodeRecord(ent.Value())
	if err == nil && rec.SessionID != sid {
		err = fmt.Errorf("%w: %s names session %q", ErrBadRecord, recordKey(sid), rec.SessionID)
	}
	if err != nil {
		return Sandbox{}, ent.Revision(), false, err
	}
	return rec, ent.Revision(), true, nil
}

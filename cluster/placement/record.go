package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/subjects"
)

// record is the value of an ownership key.
type record struct {
	Member  string `json:"member"`            // proto.actor member id (ActorSystem.ID)
	Address string `json:"address,omitempty"` // host:port of its remote, for humans
}

func (r record) encode() []byte {
	b, _ := json.Marshal(r) // two strings: cannot fail
	return b
}

func decodeRecord(b []byte) (record, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	if r.Member == "" {
		return record{}, fmt.Errorf("%w: no member", ErrInvalidRecord)
	}
	return r, nil
}

// Owner returns the id of the member that owns the grain kind/identity in
// the default bucket ([subjects.GrainsBucket]), or [ErrNoOwner]. The owner
// may have died since: liveness is the membership's business. For CLIs and
// tests; the cluster itself goes through [Lookup.Get].
func Owner(ctx context.Context, js jetstream.JetStream, kind, identity string) (memberID string, err error) {
	kv, err := js.KeyValue(ctx, subjects.GrainsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return "", ErrNoOwner
	}
	if err != nil {
		return "", fmt.Errorf("placement: bucket %s: %w", subjects.GrainsBucket, err)
	}
	e, err := kv.Get(ctx, Key(kind, identity))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", ErrNoOwner
	}
	if err != nil {
		return "", fmt.Errorf("placement: owner of %s/%s: %w", kind, identity, err)
	}
	r, err := decodeRecord(e.Value())
	if err != nil {
		return "", err
	}
	return r.Member, nil
}

package membership

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// listTimeout bounds a List whose ctx has no deadline.
const listTimeout = 5 * time.Second

// List reads the live entries of cluster clusterName, sorted by id, for
// CLIs (`iii cluster members`). It registers nothing. A missing bucket is
// an empty cluster. Entries that do not decode are left out. Of opts only
// [WithBucket] matters.
func List(ctx context.Context, js jetstream.JetStream, clusterName string, opts ...Option) ([]Entry, error) {
	if err := validateClusterName(clusterName); err != nil {
		return nil, err
	}
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, listTimeout)
		defer cancel()
	}
	kv, err := js.KeyValue(ctx, o.bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("membership: bucket %s: %w", o.bucket, err)
	}
	kves, err := liveEntries(ctx, js, kv, o.bucket, clusterName, nil)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(kves))
	for _, kve := range kves {
		e, err := decodeEntry(kve.Value())
		if err != nil || clusterName+"."+e.ID != kve.Key() {
			continue
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// liveEntries reads the current entry of every key of cluster clusterName
// in bucket (kv) for which skip (when not nil) is false, in no order;
// keys deleted or expired are left out. It reads the subjects of the
// bucket's stream, not a KV watch: a watch's "initial values done" marker
// can come before a key that is being rewritten (a heartbeat) is
// delivered, and would miss that member (docs/UPSTREAM.md).
func liveEntries(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, bucket, clusterName string, skip func(key string) bool) ([]jetstream.KeyValueEntry, error) {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("membership: bucket %s: %w", bucket, err)
	}
	subjPrefix := "$KV." + bucket + "."
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subjPrefix+clusterName+".*"))
	if err != nil {
		return nil, fmt.Errorf("membership: bucket %s: %w", bucket, err)
	}
	var out []jetstream.KeyValueEntry
	for subj := range info.State.Subjects {
		key := strings.TrimPrefix(subj, subjPrefix)
		if skip != nil && skip(key) {
			continue
		}
		kve, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue // left or expired since
		}
		if err != nil {
			return nil, fmt.Errorf("membership: get %s: %w", key, err)
		}
		out = append(out, kve)
	}
	return out, nil
}

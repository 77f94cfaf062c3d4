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
	// The subjects of the bucket's stream, not a KV watch: a watch's
	// "initial values done" marker can come before a key that is being
	// rewritten (a heartbeat) is delivered, and List would miss that
	// member (docs/UPSTREAM.md).
	st, err := js.Stream(ctx, "KV_"+o.bucket)
	if err != nil {
		return nil, fmt.Errorf("membership: bucket %s: %w", o.bucket, err)
	}
	subjPrefix := "$KV." + o.bucket + "."
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subjPrefix+clusterName+".*"))
	if err != nil {
		return nil, fmt.Errorf("membership: bucket %s: %w", o.bucket, err)
	}
	out := make([]Entry, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		key := strings.TrimPrefix(subj, subjPrefix)
		kve, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue // left or expired since
		}
		if err != nil {
			return nil, fmt.Errorf("membership: get %s: %w", key, err)
		}
		e, err := decodeEntry(kve.Value())
		if err != nil || clusterName+"."+e.ID != key {
			continue
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

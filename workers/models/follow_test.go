package models

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// withBucketCheck sets how often the store checks that the models bucket
// was not deleted or created again.
func withBucketCheck(d time.Duration) Option {
	return func(o *options) error {
		o.bucketCheck = d
		return nil
	}
}

// putRecord writes rec under its key of kv by hand.
func putRecord(t testing.TB, kv jetstream.KeyValue, rec Record) {
	t.Helper()
	key, err := recordKey(rec.Provider, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, data); err != nil {
		t.Fatal(err)
	}
}

// TestStoreFollowsBucketCreatedAgain: a models bucket deleted and created
// again under a store (`nats kv rm`/`add`, a restore) is followed again:
// the new bucket's records replace the old ones, although their revisions
// start over below the old ones, and its changes are served live. While it
// is gone, the store serves what it had.
func TestStoreFollowsBucketCreatedAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// gone is a log message to wait for while the bucket is away;
		// empty creates it again at once (the old watch stays open,
		// silent: only the bucket check sees it).
		gone string
	}{
		{name: "recreated at once"},
		{name: "gone a while", gone: "models catalog watch not reopened; retrying"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			var logs enginetest.Buffer
			e := enginetest.NewEngine(t, ns, engine.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			ctx := ctxT(t)
			s, err := Open(ctx, e, append(acmeOpts(), withBucketCheck(50*time.Millisecond))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			kv, err := e.EnsureKV(ctx, BucketConfig())
			if err != nil {
				t.Fatal(err)
			}
			extra := func(id string) Record {
				return Record{Model: agent.Model{ID: id, Provider: "acme"}, Available: true, Reconciled: true}
			}
			mark := func(id string, available bool) Record {
				return Record{Model: agent.Model{ID: id, Provider: "acme"}, Available: available}
			}
			// The old bucket: acme-small marked unavailable at revision
			// 3, a reconciled model at revision 4.
			for range 3 {
				putRecord(t, kv, mark("acme-small", false))
			}
			putRecord(t, kv, extra("acme-extra-old"))
			served := func(want string) {
				t.Helper()
				enginetest.Eventually(t, 10*time.Second, func() error {
					list, err := s.List("acme", "")
					if err != nil {
						return err
					}
					var got []string
					for _, m := range list {
						got = append(got, fmt.Sprintf("%s:%t", m.ID, m.Available))
					}
					if g := strings.Join(got, " "); g != want {
						return fmt.Errorf("served %s, want %s", g, want)
					}
					return nil
				})
			}
			served("acme-extra-old:true acme-large-20260101:true acme-old:true acme-small:false")

			js := e.JetStream()
			if err := js.DeleteKeyValue(ctx, subjects.ModelsBucket); err != nil {
				t.Fatal(err)
			}
			if tc.gone != "" {
				enginetest.Eventually(t, 10*time.Second, func() error {
					if !strings.Contains(logs.String(), tc.gone) {
						return fmt.Errorf("no %q logged yet", tc.gone)
					}
					return nil
				})
				served("acme-extra-old:true acme-large-20260101:true acme-old:true acme-small:false")
			}
			kv = enginetest.CreateKV(t, js, BucketConfig())
			// The new bucket: another reconciled model (revision 1),
			// acme-small available again (revision 2).
			putRecord(t, kv, extra("acme-extra-new"))
			putRecord(t, kv, mark("acme-small", true))
			served("acme-extra-new:true acme-large-20260101:true acme-old:true acme-small:true")
			// And it follows the new bucket live.
			putRecord(t, kv, mark("acme-old", false))
			served("acme-extra-new:true acme-large-20260101:true acme-old:false acme-small:true")
			if !strings.Contains(logs.String(), "models catalog watch reopened") {
				t.Errorf("reopening not logged:\n%s", logs.String())
			}
		})
	}
}

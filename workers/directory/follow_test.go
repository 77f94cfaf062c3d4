package directory

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// withBucketCheck sets how often the directory checks that the skills
// bucket was not deleted or created again.
func withBucketCheck(d time.Duration) Option {
	return func(o *options) error {
		o.bucketCheck = d
		return nil
	}
}

// TestFollowsBucketCreatedAgain: a skills bucket deleted and created again
// under a directory (`nats kv rm`/`add`, a restore) is followed again: the
// new bucket's skills replace the old ones, and its changes are served
// live. While it is gone, the directory serves what it had.
func TestFollowsBucketCreatedAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// gone is a log message to wait for while the bucket is away;
		// empty creates it again at once (the old watch stays open,
		// silent: only the bucket check sees it).
		gone string
	}{
		{name: "recreated at once"},
		{name: "gone a while", gone: "skills watch not reopened; retrying"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			var logs enginetest.Buffer
			e := enginetest.NewEngine(t, ns, engine.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			d := openDirectory(t, e, withBucketCheck(50*time.Millisecond))
			ctx := testCtx(t)
			kv, err := e.EnsureKV(ctx, engine.SkillsBucketConfig())
			if err != nil {
				t.Fatal(err)
			}
			put := func(kv jetstream.KeyValue, worker, fn, title string) {
				t.Helper()
				key, err := subjects.SkillKey(worker, fn)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := kv.PutString(ctx, key, "---\ntitle: "+title+"\n---\nBody.\n"); err != nil {
					t.Fatal(err)
				}
			}
			served := func(want string) {
				t.Helper()
				enginetest.Eventually(t, waitFor, func() error {
					list, err := d.List("", "")
					if err != nil {
						return err
					}
					var got []string
					for _, s := range list {
						got = append(got, s.ID+":"+s.Title)
					}
					if g := strings.Join(got, " "); g != want {
						return fmt.Errorf("served %q, want %q", g, want)
					}
					return nil
				})
			}
			put(kv, "sandbox", "fs::read", "Old read")
			put(kv, "sandbox", "fs::write", "Old write")
			served("sandbox/fs::read:Old read sandbox/fs::write:Old write")

			js := e.JetStream()
			if err := js.DeleteKeyValue(ctx, subjects.SkillsBucket); err != nil {
				t.Fatal(err)
			}
			if tc.gone != "" {
				enginetest.Eventually(t, waitFor, func() error {
					if !strings.Contains(logs.String(), tc.gone) {
						return fmt.Errorf("no %q logged yet", tc.gone)
					}
					return nil
				})
				served("sandbox/fs::read:Old read sandbox/fs::write:Old write")
			}
			kv = enginetest.CreateKV(t, js, engine.SkillsBucketConfig())
			put(kv, "sandbox", "fs::read", "New read")
			put(kv, "shell", "exec", "New exec")
			served("sandbox/fs::read:New read shell/exec:New exec")
			// And it follows the new bucket live.
			put(kv, "sandbox", "fs::list", "New list")
			served("sandbox/fs::list:New list sandbox/fs::read:New read shell/exec:New exec")
			if !strings.Contains(logs.String(), "skills watch reopened") {
				t.Errorf("reopening not logged:\n%s", logs.String())
			}
		})
	}
}

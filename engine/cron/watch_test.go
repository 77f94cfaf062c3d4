package cron_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/cron"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// TestWatchSurvivesBucketRecreate: the jobs bucket is deleted and created
// again under a running scheduler (`nats kv rm` then `nats kv add`, or a
// restore). The scheduler follows the new bucket: a job only the old one
// held stops, a job only the new one holds fires, and a job both hold runs
// on, every tick once.
func TestWatchSurvivesBucketRecreate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		check time.Duration
		// gone is a log message to wait for while the bucket is away; empty
		// creates it again at once.
		gone    string
		timeout time.Duration
	}{
		// The old watch is still open and resumes, silently, on the new
		// bucket at the old bucket's sequence: only the bucket check sees it.
		{name: "recreated at once", check: 100 * time.Millisecond, timeout: 10 * time.Second},
		{name: "gone a while", check: 100 * time.Millisecond, gone: "cron jobs watch not reopened; retrying", timeout: 10 * time.Second},
		// No bucket check: nats.go closes the watch after two missed
		// heartbeats (about 10s) and the scheduler must reopen it.
		{name: "watch closes", check: time.Hour, gone: "cron jobs watch not reopened; retrying", timeout: 40 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			var logs enginetest.Buffer
			e := enginetest.NewEngine(t, ns, engine.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			var rec tickRecorder
			rec.register(t, e, "test::tick")
			s := start(t, e, cron.WithBucketCheck(tc.check))
			ctx := context.Background()
			jobs := func(want string) {
				t.Helper()
				enginetest.Eventually(t, tc.timeout, func() error {
					var got []string
					for _, j := range s.Jobs() {
						got = append(got, j.ID)
					}
					if fmt.Sprint(got) != want {
						return fmt.Errorf("jobs %v, want %s", got, want)
					}
					return nil
				})
			}
			fired := func(id string) int {
				_, events := rec.snapshot()
				n := 0
				for _, ev := range events {
					if ev.JobID == id {
						n++
					}
				}
				return n
			}
			keep := cron.Job{ID: "keep", Expression: "@every 100ms", FunctionID: "test::tick"}
			for _, j := range []cron.Job{keep, {ID: "old", Expression: "@hourly", FunctionID: "test::tick"}} {
				if err := cron.Schedule(ctx, e, j); err != nil {
					t.Fatal(err)
				}
			}
			jobs("[keep old]")

			js := e.JetStream()
			if err := js.DeleteKeyValue(ctx, cron.JobsBucket); err != nil {
				t.Fatal(err)
			}
			if tc.gone != "" {
				enginetest.Eventually(t, tc.timeout, func() error {
					if !strings.Contains(logs.String(), tc.gone) {
						return fmt.Errorf("no %q logged yet", tc.gone)
					}
					return nil
				})
				if got := s.Jobs(); len(got) != 2 {
					t.Errorf("jobs while the bucket is away = %+v, want them running on", got)
				}
			}
			enginetest.CreateKV(t, js, cron.JobsBucketConfig())
			for _, j := range []cron.Job{keep, {ID: "new", Expression: "@every 100ms", FunctionID: "test::tick"}} {
				if err := cron.Schedule(ctx, e, j); err != nil {
					t.Fatal(err)
				}
			}
			jobs("[keep new]")
			before := fired("keep")
			enginetest.Eventually(t, 5*time.Second, func() error {
				if n := fired("new"); n < 3 {
					return fmt.Errorf("new fired %d times", n)
				}
				if n := fired("keep"); n < before+3 {
					return fmt.Errorf("keep fired %d times since the bucket came back", n-before)
				}
				return nil
			})
			if !strings.Contains(logs.String(), "cron jobs watch reopened") {
				t.Errorf("reopening not logged:\n%s", logs.String())
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			_, events := rec.snapshot()
			seen := map[string]bool{}
			for _, ev := range events {
				k := fmt.Sprintf("%s@%d", ev.JobID, ev.TickMS)
				if seen[k] {
					t.Errorf("%s fired twice", k)
				}
				seen[k] = true
			}
		})
	}
}

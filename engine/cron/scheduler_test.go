package cron_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/cron"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// fakeClock is a manual clock: After channels fire when Advance passes
// their deadline.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(now time.Time) *fakeClock { return &fakeClock{now: now} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

func (c *fakeClock) Advance(d time.Duration) {
	c.Move(d)
	c.Wake()
}

// Move moves the clock without waking the waiters whose deadline passes:
// a loop blocked in After stays blocked until Wake, so a test can hold a
// tick that is due but not yet seen.
func (c *fakeClock) Move(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Wake fires the After channels whose deadline has passed.
func (c *fakeClock) Wake() {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			keep = append(keep, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = keep
}

// Waiting is the number of After channels not yet fired.
func (c *fakeClock) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// tickRecorder is a function that counts its calls per tick.
type tickRecorder struct {
	mu     sync.Mutex
	counts map[int64]int
	events []cron.Event
}

func (r *tickRecorder) register(t *testing.T, e *engine.Engine, id string) {
	t.Helper()
	w, err := e.Worker("ticks")
	if err != nil {
		t.Fatal(err)
	}
	err = w.Register(engine.Function{ID: id, Handler: engine.Typed(func(_ context.Context, ev cron.Event) (engine.Empty, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.counts == nil {
			r.counts = map[int64]int{}
		}
		r.counts[ev.TickMS]++
		r.events = append(r.events, ev)
		return engine.Empty{}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
}

func (r *tickRecorder) snapshot() (map[int64]int, []cron.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := make(map[int64]int, len(r.counts))
	for k, v := range r.counts {
		c[k] = v
	}
	return c, append([]cron.Event(nil), r.events...)
}

func start(t *testing.T, e *engine.Engine, opts ...cron.Option) *cron.Scheduler {
	t.Helper()
	s, err := cron.Start(context.Background(), e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestEachTickFiresOnceAcrossThreeNodes(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	var rec tickRecorder
	rec.register(t, enginetest.NewEngine(t, ns), "test::tick")
	ctx := context.Background()

	scheds := make([]*cron.Scheduler, 3)
	for i := range scheds {
		scheds[i] = start(t, enginetest.NewEngine(t, ns))
	}
	job := cron.Job{ID: "fast", Expression: "@every 200ms", FunctionID: "test::tick", Data: map[string]any{"n": 42}}
	if err := cron.Schedule(ctx, enginetest.NewEngine(t, ns), job); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if c, _ := rec.snapshot(); len(c) < 8 {
			return fmt.Errorf("%d ticks so far", len(c))
		}
		return nil
	})
	// Close waits for the calls in flight, so the counts are final.
	for _, s := range scheds {
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	counts, events := rec.snapshot()
	ticks := make([]int64, 0, len(counts))
	for tick, n := range counts {
		if n != 1 {
			t.Errorf("tick %d fired %d times", tick, n)
		}
		if tick%200 != 0 {
			t.Errorf("tick %d is not a multiple of 200ms", tick)
		}
		ticks = append(ticks, tick)
	}
	sort.Slice(ticks, func(a, b int) bool { return ticks[a] < ticks[b] })
	for i := 1; i < len(ticks); i++ {
		if ticks[i]-ticks[i-1] != 200 {
			t.Errorf("gap between ticks %d and %d", ticks[i-1], ticks[i])
		}
	}
	ev := events[0]
	if ev.JobID != "fast" || fmt.Sprint(ev.Data.(map[string]any)["n"]) != "42" || ev.Time().UnixMilli() != ev.TickMS {
		t.Fatalf("event = %+v", ev)
	}
	if tt, err := time.Parse(time.RFC3339Nano, ev.Tick); err != nil || !tt.Equal(ev.Time()) {
		t.Fatalf("tick %q does not parse as %v: %v", ev.Tick, ev.Time(), err)
	}
}

func TestLeasesExpire(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	var rec tickRecorder
	rec.register(t, e, "test::tick")
	// Grace 1s: leases live 3s, twice the grace plus a second.
	s := start(t, e, cron.WithMisfireGrace(time.Second))
	ctx := context.Background()
	if err := s.Schedule(ctx, cron.Job{ID: "ttl", Expression: "@every 100ms", FunctionID: "test::tick"}); err != nil {
		t.Fatal(err)
	}
	kv, err := e.JetStream().KeyValue(ctx, subjects.CronBucket)
	if err != nil {
		t.Fatal(err)
	}
	var tick int64
	enginetest.Eventually(t, 5*time.Second, func() error {
		c, _ := rec.snapshot()
		for k := range c {
			tick = k
			return nil
		}
		return errors.New("no tick yet")
	})
	key := fmt.Sprintf("ttl.%d", tick)
	if ent, err := kv.Get(ctx, key); err != nil || len(ent.Value()) == 0 {
		t.Fatalf("lease %s: %v", key, err)
	}
	stream, err := e.JetStream().Stream(ctx, "KV_"+subjects.CronBucket)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := stream.GetLastMsgForSubject(ctx, "$KV."+subjects.CronBucket+"."+key)
	if err != nil {
		t.Fatal(err)
	}
	if ttl := raw.Header.Get(jetstream.MsgTTLHeader); ttl != "3s" {
		t.Fatalf("lease %s TTL = %q, want 3s", key, ttl)
	}
	if _, err := s.Unschedule(ctx, "ttl"); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if _, err := kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
			return fmt.Errorf("lease %s still there: %v", key, err)
		}
		return nil
	})
}

func TestFakeClockDailyJob(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	var rec tickRecorder
	rec.register(t, e, "test::daily")
	clk := newFakeClock(time.Date(2030, 1, 1, 23, 59, 0, 0, time.UTC))
	s := start(t, e, cron.WithClock(clk))
	ctx := context.Background()
	if err := s.Schedule(ctx, cron.Job{ID: "daily", Expression: "@daily", FunctionID: "test::daily"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Schedule(ctx, cron.Job{ID: "tokyo", Expression: "0 9 * * *", Timezone: "Asia/Tokyo", FunctionID: "test::daily"}); err != nil {
		t.Fatal(err)
	}
	waitFor := func(n int) {
		t.Helper()
		enginetest.Eventually(t, 5*time.Second, func() error {
			if _, ev := rec.snapshot(); len(ev) != n {
				return fmt.Errorf("%d events, want %d", len(ev), n)
			}
			if w := clk.Waiting(); w < 2 {
				return fmt.Errorf("%d job loops waiting", w)
			}
			return nil
		})
	}
	waitFor(0)
	if next, ok := s.Next("daily"); !ok || !next.Equal(time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("Next(daily) = %v, %v", next, ok)
	}

	clk.Advance(time.Minute) // midnight UTC = 09:00 in Tokyo: both fire
	waitFor(2)
	clk.Advance(24 * time.Hour)
	waitFor(4)
	// Three days at once: the due ticks are far past the misfire grace, so
	// they are skipped rather than caught up.
	clk.Advance(72*time.Hour + time.Hour)
	waitFor(4)

	_, events := rec.snapshot()
	got := map[string][]string{}
	for _, ev := range events {
		got[ev.JobID] = append(got[ev.JobID], ev.Tick)
	}
	want := []string{"2030-01-02T00:00:00.000Z", "2030-01-03T00:00:00.000Z"}
	for _, id := range []string{"daily", "tokyo"} {
		sort.Strings(got[id])
		if fmt.Sprint(got[id]) != fmt.Sprint(want) {
			t.Errorf("%s fired at %v, want %v", id, got[id], want)
		}
	}
}

// TestFallBackFiresOnceAcrossRestart: a daily 01:30 New York job fires at
// 01:30 EDT on the fall-back day; a scheduler that starts during the
// repeated hour (a node restarted, or the job replaced, at 01:10 EST) must
// not fire 01:30 EST as well.
func TestFallBackFiresOnceAcrossRestart(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	var rec tickRecorder
	rec.register(t, e, "test::nightly")
	ctx := context.Background()
	job := cron.Job{ID: "nightly", Expression: "30 1 * * *", Timezone: "America/New_York", FunctionID: "test::nightly"}
	if err := cron.Schedule(ctx, e, job); err != nil {
		t.Fatal(err)
	}
	waitFor := func(clk *fakeClock, n int) {
		t.Helper()
		enginetest.Eventually(t, 5*time.Second, func() error {
			if _, ev := rec.snapshot(); len(ev) != n {
				return fmt.Errorf("%d events, want %d", len(ev), n)
			}
			if clk.Waiting() < 1 {
				return errors.New("job loop not waiting")
			}
			return nil
		})
	}

	// 01:29 EDT: the first 01:30 fires.
	clk := newFakeClock(time.Date(2024, 11, 3, 5, 29, 0, 0, time.UTC))
	first := start(t, enginetest.NewEngine(t, ns), cron.WithClock(clk))
	waitFor(clk, 0)
	clk.Advance(time.Minute)
	waitFor(clk, 1)
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// 01:10 EST, an hour later by the wall clock's second pass.
	clk = newFakeClock(time.Date(2024, 11, 3, 6, 10, 0, 0, time.UTC))
	second := start(t, enginetest.NewEngine(t, ns), cron.WithClock(clk))
	if next, ok := second.Next("nightly"); !ok || !next.Equal(time.Date(2024, 11, 4, 6, 30, 0, 0, time.UTC)) {
		t.Errorf("Next(nightly) = %v, %v; want 2024-11-04 01:30 EST", next, ok)
	}
	waitFor(clk, 1)
	// To 01:30 EST and a minute on, each step within the misfire grace.
	// Once the loop waits again it has claimed whatever fell due, and
	// Close waits for the calls in flight.
	for _, d := range []time.Duration{20 * time.Minute, time.Minute} {
		clk.Advance(d)
		enginetest.Eventually(t, 5*time.Second, func() error {
			if clk.Waiting() < 1 {
				return errors.New("job loop not waiting")
			}
			return nil
		})
	}
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ev := rec.snapshot(); len(ev) != 1 || ev[0].Tick != "2024-11-03T05:30:00.000Z" {
		t.Fatalf("fired %+v, want only 01:30 EDT", ev)
	}
}

// TestFailingFunction: a function that fails, or hangs until the fire
// timeout, is called once per tick (no retry), and later ticks still fire
// on time.
func TestFailingFunction(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	var mu sync.Mutex
	calls := map[string]map[int64]int{}
	w, err := e.Worker("failing")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"test::fails", "test::hangs"} {
		err := w.Register(engine.Function{ID: id, Handler: engine.Typed(func(ctx context.Context, ev cron.Event) (engine.Empty, error) {
			mu.Lock()
			if calls[id] == nil {
				calls[id] = map[int64]int{}
			}
			calls[id][ev.TickMS]++
			mu.Unlock()
			if id == "test::hangs" {
				<-ctx.Done()
			}
			return engine.Empty{}, wire.Errorf(wire.CodeInternal, "boom")
		})})
		if err != nil {
			t.Fatal(err)
		}
	}
	s := start(t, enginetest.NewEngine(t, ns), cron.WithFireTimeout(time.Second))
	ctx := context.Background()
	for _, id := range []string{"fails", "hangs"} {
		if err := s.Schedule(ctx, cron.Job{ID: id, Expression: "@every 100ms", FunctionID: "test::" + id}); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range []string{"test::fails", "test::hangs"} {
			if n := len(calls[id]); n < 5 {
				return fmt.Errorf("%s called for %d ticks", id, n)
			}
		}
		return nil
	})
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, ticks := range calls {
		for tick, n := range ticks {
			if n != 1 {
				t.Errorf("%s: tick %d called %d times", id, tick, n)
			}
		}
	}
}

func TestJobsFollowTheBucket(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	// A stored job exists before the scheduler starts: Start loads it.
	if err := cron.Schedule(ctx, e, cron.Job{ID: "a", Expression: "@hourly", FunctionID: "test::x"}); err != nil {
		t.Fatal(err)
	}
	s := start(t, enginetest.NewEngine(t, ns))
	if got := s.Jobs(); len(got) != 1 || got[0].ID != "a" {
		t.Fatalf("jobs after start = %+v", got)
	}
	ids := func() string {
		var out []string
		for _, j := range s.Jobs() {
			out = append(out, j.ID+"="+j.Expression)
		}
		return fmt.Sprint(out)
	}
	expect := func(want string) {
		t.Helper()
		enginetest.Eventually(t, 5*time.Second, func() error {
			if got := ids(); got != want {
				return fmt.Errorf("jobs %s, want %s", got, want)
			}
			return nil
		})
	}
	// Replace, add, remove.
	if err := cron.Schedule(ctx, e, cron.Job{ID: "a", Expression: "@daily", FunctionID: "test::x"}); err != nil {
		t.Fatal(err)
	}
	if err := cron.Schedule(ctx, e, cron.Job{ID: "b", Expression: "*/5 * * * *", FunctionID: "test::x"}); err != nil {
		t.Fatal(err)
	}
	expect("[a=@daily b=*/5 * * * *]")
	// A hand-written entry that does not decode, or names another id, is
	// ignored; one that replaces a running job stops it.
	kv, err := e.JetStream().KeyValue(ctx, cron.JobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for key, val := range map[string]string{
		"junk": "not json",
		"c":    `{"id":"other","expression":"@daily","function_id":"test::x"}`,
		"b":    `{"id":"b","expression":"61 * * * *","function_id":"test::x"}`,
	} {
		if _, err := kv.Put(ctx, key, []byte(val)); err != nil {
			t.Fatal(err)
		}
	}
	expect("[a=@daily]")
	if removed, err := cron.Unschedule(ctx, e, "a"); err != nil || !removed {
		t.Fatalf("unschedule = %v, %v", removed, err)
	}
	if removed, err := cron.Unschedule(ctx, e, "a"); err != nil || removed {
		t.Fatalf("second unschedule = %v, %v", removed, err)
	}
	expect("[]")
	jobs, err := cron.List(ctx, e)
	if err != nil || len(jobs) != 0 {
		t.Fatalf("list = %+v, %v (hand-written junk must be skipped)", jobs, err)
	}
}

func TestStartRefusesLeaseBucketWithoutTTL(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := context.Background()
	if _, err := e.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subjects.CronBucket}); err != nil {
		t.Fatal(err)
	}
	_, err := cron.Start(ctx, e)
	if !errors.Is(err, cron.ErrNoKeyTTL) || !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	for name, opt := range map[string]cron.Option{
		"nil clock":     cron.WithClock(nil),
		"nil location":  cron.WithLocation(nil),
		"short grace":   cron.WithMisfireGrace(time.Millisecond),
		"zero timeout":  cron.WithFireTimeout(0),
		"negative time": cron.WithFireTimeout(-time.Second),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := cron.Start(context.Background(), e, opt); !errors.Is(err, engine.ErrInvalidOption) {
				t.Fatalf("err = %v", err)
			}
		})
	}
	if _, err := cron.Start(context.Background(), nil); !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("nil engine: %v", err)
	}
}

// TestChangeRacingADueTick: a job changed or removed just as one of its
// ticks falls due, before its loop has claimed it. The change takes effect
// when the scheduler applies it: the due tick fires once, with the old
// definition, and the new definition's ticks follow. The fake clock holds
// the due tick (Move without Wake) until the change is applied, which is
// the race every node could lose at once.
func TestChangeRacingADueTick(t *testing.T) {
	t.Parallel()
	v1 := cron.Job{ID: "racy", Expression: "* * * * *", FunctionID: "test::racy", Data: map[string]any{"v": "1"}}
	for _, tc := range []struct {
		name string
		// change is applied with the 10:01 tick due; nil unschedules.
		change *cron.Job
		// then advances the clock once the due tick has fired.
		then time.Duration
		want []string
	}{
		{
			name:   "data changed",
			change: &cron.Job{ID: "racy", Expression: "* * * * *", FunctionID: "test::racy", Data: map[string]any{"v": "2"}},
			then:   time.Minute,
			want:   []string{"10:01:00 v1", "10:02:00 v2"},
		},
		{
			name:   "schedule changed",
			change: &cron.Job{ID: "racy", Expression: "30 * * * * *", FunctionID: "test::racy", Data: map[string]any{"v": "2"}},
			then:   30 * time.Second,
			want:   []string{"10:01:00 v1", "10:01:30 v2"},
		},
		{
			name: "unscheduled",
			want: []string{"10:01:00 v1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			e := enginetest.NewEngine(t, ns)
			var rec tickRecorder
			rec.register(t, e, "test::racy")
			clk := newFakeClock(time.Date(2030, 1, 1, 10, 0, 30, 0, time.UTC))
			s := start(t, e, cron.WithClock(clk))
			ctx := context.Background()
			fired := func() []string {
				_, events := rec.snapshot()
				out := make([]string, 0, len(events))
				for _, ev := range events {
					out = append(out, ev.Time().Format("15:04:05")+" v"+fmt.Sprint(ev.Data.(map[string]any)["v"]))
				}
				sort.Strings(out)
				return out
			}
			expect := func(want []string) {
				t.Helper()
				enginetest.Eventually(t, 5*time.Second, func() error {
					if got := fired(); fmt.Sprint(got) != fmt.Sprint(want) {
						return fmt.Errorf("fired %v, want %v", got, want)
					}
					return nil
				})
			}
			jobs := func(want string) {
				t.Helper()
				enginetest.Eventually(t, 5*time.Second, func() error {
					var got []string
					for _, j := range s.Jobs() {
						got = append(got, j.Expression+" v"+fmt.Sprint(j.Data.(map[string]any)["v"]))
					}
					if fmt.Sprint(got) != want {
						return fmt.Errorf("jobs %v, want %s", got, want)
					}
					return nil
				})
			}

			if err := s.Schedule(ctx, v1); err != nil {
				t.Fatal(err)
			}
			jobs("[* * * * * v1]")
			enginetest.Eventually(t, 5*time.Second, func() error {
				if clk.Waiting() < 1 {
					return errors.New("job loop not waiting for 10:01")
				}
				return nil
			})
			clk.Move(30 * time.Second) // 10:01:00 is due; the loop has not seen it
			if tc.change != nil {
				if err := s.Schedule(ctx, *tc.change); err != nil {
					t.Fatal(err)
				}
				jobs(fmt.Sprintf("[%s v2]", tc.change.Expression))
			} else {
				if _, err := s.Unschedule(ctx, v1.ID); err != nil {
					t.Fatal(err)
				}
				jobs("[]")
			}
			clk.Wake()
			expect(tc.want[:1])
			if tc.then > 0 {
				clk.Advance(tc.then)
				expect(tc.want)
			}
			// Close waits for the loops and the calls: the counts are final.
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if got := fired(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("fired %v, want %v", got, tc.want)
			}
		})
	}
}

// stepClock is a clock whose wall time can step (a host resumed from
// suspend, an NTP step) while its timers, like the runtime's, count only
// the time that elapses.
type stepClock struct {
	mu      sync.Mutex
	wall    time.Time
	elapsed time.Duration
	waiters []stepWaiter
}

type stepWaiter struct {
	at time.Duration
	ch chan time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.wall
		return ch
	}
	c.waiters = append(c.waiters, stepWaiter{at: c.elapsed + d, ch: ch})
	return ch
}

// Step moves the wall clock alone.
func (c *stepClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
}

// Elapse lets d pass and fires the timers it ends.
func (c *stepClock) Elapse(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall, c.elapsed = c.wall.Add(d), c.elapsed+d
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at > c.elapsed {
			keep = append(keep, w)
			continue
		}
		w.ch <- c.wall
	}
	c.waiters = keep
}

func (c *stepClock) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// TestTickAfterWallClockStep: a nightly job waits hours for its tick; when
// the host sleeps through them (or the clock steps forward) the tick is
// due at once by the wall clock, and the scheduler claims it within the
// misfire grace instead of waking hours later and skipping it.
func TestTickAfterWallClockStep(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	var rec tickRecorder
	rec.register(t, e, "test::nightly")
	clk := &stepClock{wall: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := start(t, e, cron.WithClock(clk))
	if err := s.Schedule(context.Background(), cron.Job{ID: "nightly", Expression: "0 3 * * *", FunctionID: "test::nightly"}); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if clk.Waiting() == 0 {
			return errors.New("job loop not waiting")
		}
		return nil
	})
	clk.Step(3*time.Hour + 5*time.Second) // suspended from 00:00 to 03:00:05
	clk.Elapse(cron.DefaultMisfireGrace - 10*time.Second)
	enginetest.Eventually(t, 5*time.Second, func() error {
		if _, ev := rec.snapshot(); len(ev) != 1 || ev[0].Tick != "2030-01-01T03:00:00.000Z" {
			return fmt.Errorf("events %v, want the 03:00 tick", ev)
		}
		return nil
	})
}

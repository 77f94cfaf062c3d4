package cron

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Span attributes of a tick's span.
const (
	AttrJobID = "iii.cron.job_id"
	AttrTick  = "iii.cron.tick"
)

// Scheduler runs every job stored in [JobsBucket] on this node. Each node
// runs one; all of them compute the same ticks, and for each tick the node
// that creates the lease key "<job id>.<tick unix ms>" in
// [subjects.CronBucket] first calls the function, so a tick fires once
// across the cluster however many schedulers run.
type Scheduler struct {
	e        *engine.Engine
	opts     options
	leaseKV  jetstream.KeyValue
	leaseTTL time.Duration
	node     []byte

	// stopLoops ends the watch and the job loops. Claims and function calls
	// derive from base, which stopFires cancels once Close has waited long
	// enough (the engine keeps its handler base context the same way).
	stopLoops context.CancelFunc
	base      context.Context
	stopFires context.CancelFunc
	watchDone chan struct{}
	loops     sync.WaitGroup
	fires     sync.WaitGroup

	mu     sync.Mutex
	jobs   map[string]*runningJob
	closed bool
}

// runningJob is one definition of a job and its loop. A definition owns
// the ticks after from and, once replaced or removed, those up to stopAt:
// the change takes effect at the moment this scheduler applies it, so it
// neither eats a tick that was already due nor lets two definitions claim
// one.
type runningJob struct {
	job    Job
	raw    []byte
	expr   *Expression
	cancel context.CancelFunc
	// from is when this definition took over: when it was first applied,
	// or the stopAt of the definition it replaced.
	from time.Time
	// prev is the definition this one replaced; its loop ends (having
	// claimed its ticks up to from) before this one starts.
	prev *runningJob
	// stopAt (under Scheduler.mu) is when this definition was replaced or
	// removed; zero while it runs and when the scheduler closes.
	stopAt time.Time
	done   chan struct{}
}

// Start opens the job and lease buckets (creating them when missing), loads
// every stored job and starts running them; it returns once the stored jobs
// are loaded. Later changes to the jobs bucket (from [Schedule],
// [Unschedule], cron::schedule on any node, or `nats kv put`) apply live.
// Stop the scheduler with [Scheduler.Close].
func Start(ctx context.Context, e *engine.Engine, opts ...Option) (*Scheduler, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	jobs, err := jobsKV(ctx, e)
	if err != nil {
		return nil, err
	}
	leases, err := e.EnsureKV(ctx, LeaseBucketConfig())
	if err != nil {
		return nil, err
	}
	st, err := leases.Status(ctx)
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "lease bucket status")
	}
	if st.LimitMarkerTTL() <= 0 {
		return nil, wire.Wrap(wire.CodeUnavailable, ErrNoKeyTTL, "recreate bucket %s with LimitMarkerTTL", st.Bucket())
	}
	// A lease must outlive every attempt to claim its tick: attempts come at
	// most grace late by each node's clock, clocks differ by less than the
	// grace, and the second leaves room for the claims' round trips.
	ttl := leaseTTL(o.grace)

	loopCtx, stopLoops := context.WithCancel(context.Background())
	base, stopFires := context.WithCancel(context.Background())
	host, _ := os.Hostname()
	s := &Scheduler{
		e:         e,
		opts:      o,
		leaseKV:   leases,
		leaseTTL:  ttl,
		node:      []byte(host + "/" + strconv.Itoa(os.Getpid())),
		stopLoops: stopLoops,
		stopFires: stopFires,
		base:      base,
		watchDone: make(chan struct{}),
		jobs:      map[string]*runningJob{},
	}
	w, err := engine.WatchKV(loopCtx, e.Conn(), jobs, engine.KVWatchConfig{})
	if err != nil {
		stopLoops()
		stopFires()
		return nil, wire.Wrap(wire.CodeUnavailable, err, "watch %s", JobsBucket)
	}
	if id, err := e.Conn().GetClientID(); err == nil {
		s.node = strconv.AppendUint(append(s.node, '/'), id, 10)
	}
	ready := make(chan struct{})
	go s.watch(loopCtx, w, ready)
	select {
	case <-ready:
		return s, nil
	case <-s.watchDone:
		_ = s.Close(ctx)
		return nil, wire.Errorf(wire.CodeUnavailable, "watch of %s ended before the jobs loaded", JobsBucket)
	case <-ctx.Done():
		_ = s.Close(context.Background())
		return nil, wire.FromNATS(ctx.Err())
	}
}

// apply starts or replaces the job stored under key.
func (s *Scheduler) apply(key string, value []byte) {
	log := s.e.Logger()
	j, err := decodeJob(value)
	if err == nil && j.ID != key {
		err = fmt.Errorf("id %q does not match its key", j.ID)
	}
	var x *Expression
	if err == nil {
		x, err = j.compile(s.opts.loc)
	}
	if err != nil {
		// A definition written by hand that we cannot run: stop the old one
		// rather than keep running what the bucket no longer says.
		log.Error("cron job ignored: bad definition", "job_id", key, "error", err)
		s.remove(key)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	now := s.opts.clock.Now()
	old, replacing := s.jobs[key]
	if replacing && bytes.Equal(old.raw, value) {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	rj := &runningJob{job: j, raw: bytes.Clone(value), expr: x, cancel: cancel, from: now, done: make(chan struct{})}
	if replacing {
		old.stopAt = now
		old.cancel()
		rj.prev = old
	}
	s.jobs[key] = rj
	s.loops.Add(1)
	go s.run(ctx, rj)
	log.Debug("cron job scheduled", "job_id", j.ID, "expression", j.Expression, "function_id", j.FunctionID)
}

func (s *Scheduler) remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rj, ok := s.jobs[key]; ok {
		rj.stopAt = s.opts.clock.Now()
		rj.cancel()
		delete(s.jobs, key)
		s.e.Logger().Debug("cron job unscheduled", "job_id", key)
	}
}

func (s *Scheduler) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for k, rj := range s.jobs {
		rj.cancel()
		delete(s.jobs, k)
	}
}

// retain removes every running job whose id is not in keep.
func (s *Scheduler) retain(keep map[string]bool) {
	s.mu.Lock()
	var gone []string
	for k := range s.jobs {
		if !keep[k] {
			gone = append(gone, k)
		}
	}
	s.mu.Unlock()
	for _, k := range gone {
		s.remove(k)
	}
}

// stopTime is rj's stopAt.
func (s *Scheduler) stopTime(rj *runningJob) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rj.stopAt
}

// run waits for each tick of one job definition and claims it, until ctx
// ends; a definition that was replaced or removed then still claims its
// ticks due by its stopAt. A job that starts (or a scheduler that starts)
// begins with the next tick after now, a replacing definition with the
// next one after the moment it replaced the old: missed ticks are not
// caught up.
func (s *Scheduler) run(ctx context.Context, rj *runningJob) {
	defer s.loops.Done()
	defer close(rj.done)
	if rj.prev != nil {
		<-rj.prev.done
		rj.prev = nil
	}
	clock := s.opts.clock
	log := s.e.Logger()
	next := rj.expr.Next(rj.from)
	for {
		if next.IsZero() {
			log.Warn("cron job has no further ticks", "job_id", rj.job.ID, "expression", rj.job.Expression)
			return
		}
		now := clock.Now()
		if ctx.Err() != nil {
			if stop := s.stopTime(rj); stop.IsZero() || next.After(stop) || next.After(now) {
				return
			}
		} else if d := next.Sub(now); d > 0 {
			// Wait at most half the grace at a time: a timer counts the
			// time that elapses, not the wall clock the tick is set by, so
			// after a host suspend or a step of the clock one long wait
			// would end past the tick's grace and skip it.
			select {
			case <-ctx.Done():
			case <-clock.After(min(d, s.opts.grace/2)):
			}
			continue // re-check: the clock may have moved less than d
		}
		if late := now.Sub(next); late > s.opts.grace {
			log.Warn("cron tick skipped: too late", "job_id", rj.job.ID, "tick", next, "late", late)
		} else {
			s.claim(rj, next)
		}
		// Ticks that fell due while this one was late are left to nodes
		// that were on time.
		next = rj.expr.Next(maxTime(next, now))
	}
}

// leaseTTL is how long a tick's lease lives: twice the misfire grace plus
// a second, rounded up to whole seconds (per-key TTLs are whole seconds).
func leaseTTL(grace time.Duration) time.Duration {
	return (2*grace + 2*time.Second - 1).Truncate(time.Second)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// claim creates the tick's lease; the node that creates it fires. A claim
// begun is finished even if the job changes meanwhile: a lease stored
// under a canceled create would name the tick taken with no one firing it.
func (s *Scheduler) claim(rj *runningJob, tick time.Time) {
	cctx, cancel := context.WithTimeout(s.base, 5*time.Second)
	defer cancel()
	_, err := s.leaseKV.Create(cctx, leaseKey(rj.job.ID, tick), s.node, jetstream.KeyTTL(s.leaseTTL))
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrKeyExists):
		return // another node fires this tick
	default:
		if s.base.Err() == nil {
			s.e.Logger().Warn("cron lease failed; tick not fired here", "job_id", rj.job.ID, "tick", tick, "error", err)
		}
		return
	}
	s.fires.Add(1)
	go func() {
		defer s.fires.Done()
		s.fire(rj.job, tick)
	}()
}

// fire calls the job's function once for tick. The call is not retried: the
// tick is claimed and no other node will try it (at most once per tick).
func (s *Scheduler) fire(j Job, tick time.Time) {
	ctx, cancel := context.WithTimeout(s.base, s.opts.fireTimeout)
	defer cancel()
	tick = tick.UTC()
	ctx, span := s.e.Tracer().Start(ctx, "cron "+j.ID, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String(AttrJobID, j.ID),
			attribute.String(engine.AttrFunctionID, j.FunctionID),
			attribute.String(AttrTick, tick.Format(time.RFC3339Nano)),
		))
	defer span.End()
	ev := Event{JobID: j.ID, Tick: tick.Format(tickLayout), TickMS: tick.UnixMilli(), Data: j.Data}
	if err := s.e.Trigger(ctx, j.FunctionID, ev, nil); err != nil {
		we := wire.From(err)
		span.SetStatus(codes.Error, string(we.Code))
		span.RecordError(we)
		s.e.Logger().Warn("cron function failed", "job_id", j.ID, "function_id", j.FunctionID, "tick", tick, "error", err)
	}
}

// tickLayout is RFC 3339 in UTC with exactly three fractional digits.
const tickLayout = "2006-01-02T15:04:05.000Z07:00"

// Jobs is the set of jobs this scheduler runs right now, sorted by id. It
// follows the bucket with the latency of a KV watch.
func (s *Scheduler) Jobs() []Job {
	s.mu.Lock()
	out := make([]Job, 0, len(s.jobs))
	for _, rj := range s.jobs {
		out = append(out, rj.job)
	}
	s.mu.Unlock()
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// Next is the next tick of the running job id after the scheduler's now, and
// false when this scheduler does not run id.
func (s *Scheduler) Next(id string) (time.Time, bool) {
	s.mu.Lock()
	rj, ok := s.jobs[id]
	s.mu.Unlock()
	if !ok {
		return time.Time{}, false
	}
	return rj.expr.Next(s.opts.clock.Now()), true
}

// Schedule is [Schedule] on the scheduler's engine.
func (s *Scheduler) Schedule(ctx context.Context, job Job) error {
	if s.isClosed() {
		return ErrClosed
	}
	return Schedule(ctx, s.e, job)
}

// Unschedule is [Unschedule] on the scheduler's engine.
func (s *Scheduler) Unschedule(ctx context.Context, id string) (bool, error) {
	if s.isClosed() {
		return false, ErrClosed
	}
	return Unschedule(ctx, s.e, id)
}

func (s *Scheduler) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close stops the watch and every job loop, then waits until ctx ends for
// function calls in flight; calls still running then are canceled. Stored
// jobs stay in the bucket for the other schedulers.
func (s *Scheduler) Close(ctx context.Context) error {
	s.stopLoops()
	<-s.watchDone
	done := make(chan struct{})
	go func() {
		s.loops.Wait()
		s.fires.Wait()
		close(done)
	}()
	defer s.stopFires()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cron: close: function calls still running: %w", ctx.Err())
	}
}

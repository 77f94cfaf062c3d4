package orchestrator

import (
	"context"
	"iter"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/subjects"
)

// sessionKV is a per-session bucket: the primary copy for sessions without
// a home region, a region's copy for "<region>.<name>" (docs/REGIONS.md).
type sessionKV struct {
	e      *engine.Engine
	bucket string
}

// of is the copy holding sid's keys (a coded not_found error for a region
// with no copy).
func (s sessionKV) of(ctx context.Context, sid string) (jetstream.KeyValue, error) {
	return s.e.SessionKV(ctx, s.bucket, sid)
}

// regions lists "" and every region with a copy of the bucket.
func (s sessionKV) regions(ctx context.Context) ([]string, error) {
	return s.e.SessionRegions(ctx, "KV_"+s.bucket)
}

// copyOf is region's copy of the bucket.
func (s sessionKV) copyOf(ctx context.Context, region string) (jetstream.KeyValue, error) {
	return s.e.RegionKV(ctx, s.bucket, region)
}

// perCopy runs one consumer per copy of a per-session stream: start makes
// the consumer of one copy. refresh starts those of copies that appeared
// since (a region's first node, a takeover); stop stops them all.
type perCopy struct {
	stream string
	start  func(ctx context.Context, stream string) (jetstream.ConsumeContext, error)

	mu      sync.Mutex
	ccs     map[string]jetstream.ConsumeContext // by copy name
	regions []string                            // of the copies consumed
	done    bool
}

// consumed lists the regions whose copies are consumed ("" the primary).
func (p *perCopy) consumed() []string {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.regions)
}

// refresh lists the copies of the stream (the primary one first) and
// starts a consumer on each that has none.
func (p *perCopy) refresh(ctx context.Context, e *engine.Engine) error {
	regions, err := e.SessionRegions(ctx, p.stream)
	if err != nil {
		return err
	}
	for _, r := range regions {
		name := subjects.RegionalCopy(p.stream, r)
		p.mu.Lock()
		_, ok := p.ccs[name]
		p.mu.Unlock()
		if ok {
			continue
		}
		cc, err := p.start(ctx, name)
		if err != nil {
			return err
		}
		p.mu.Lock()
		if p.done {
			p.mu.Unlock()
			cc.Stop()
			return nil
		}
		if p.ccs == nil {
			p.ccs = map[string]jetstream.ConsumeContext{}
		}
		p.ccs[name] = cc
		p.regions = append(p.regions, r)
		p.mu.Unlock()
	}
	return nil
}

func (p *perCopy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	for _, cc := range p.ccs {
		cc.Stop()
	}
	p.ccs = nil
}

// sessionKeys yields the session id of every turn record, in every copy of
// the turn-state bucket; a copy that cannot be listed is skipped (the next
// sweep lists it again).
func (o *Orchestrator) sessionKeys(ctx context.Context) iter.Seq[string] {
	return func(yield func(string) bool) {
		regions, err := o.turns.regions(ctx)
		if err != nil {
			o.logger.Warn("turn-state copies not listed; sweeping the primary one", "error", err)
			regions = []string{""}
		}
		for _, r := range regions {
			kv, err := o.turns.copyOf(ctx, r)
			if err != nil {
				continue
			}
			lister, err := kv.ListKeys(ctx)
			if err != nil {
				continue // an empty bucket
			}
			for key := range lister.Keys() {
				if !yield(key) {
					_ = lister.Stop()
					return
				}
			}
		}
	}
}

// approvalRegions lists the regions whose approvals this process watches.
func (o *Orchestrator) approvalRegions() []string { return o.approvalsCC.consumed() }

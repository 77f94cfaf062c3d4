package gopool

import (
	"sync/atomic"
	"time"
)

// DefaultIdle is how long a goroutine waits for another function before it
// exits.
const DefaultIdle = 10 * time.Second

// Pool runs functions on reused goroutines. The zero value is not usable:
// make one with [New]. It is safe for concurrent use.
type Pool struct {
	idle    time.Duration
	work    chan func()
	waiting atomic.Int64 // goroutines waiting for a function
	started atomic.Int64 // goroutines started, in all
}

// Option configures a [Pool].
type Option func(*Pool)

// WithIdle sets how long a goroutine waits for another function before it
// exits (default [DefaultIdle]; a value ≤ 0 keeps the default).
func WithIdle(d time.Duration) Option {
	return func(p *Pool) {
		if d > 0 {
			p.idle = d
		}
	}
}

// New returns a pool.
func New(opts ...Option) *Pool {
	p := &Pool{idle: DefaultIdle, work: make(chan func())}
	for _, opt := range opts {
		opt(p)
	}
	return p
}

// Go runs fn on a goroutine that is waiting for work, or on a new one when
// none is. It never blocks.
func (p *Pool) Go(fn func()) {
	select {
	case p.work <- fn:
	default:
		p.started.Add(1)
		go p.run(fn)
	}
}

// Waiting is the number of goroutines waiting for a function.
func (p *Pool) Waiting() int { return int(p.waiting.Load()) }

// Started is the number of goroutines the pool has started.
func (p *Pool) Started() int { return int(p.started.Load()) }

func (p *Pool) run(fn func()) {
	fn()
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		p.waiting.Add(1)
		select {
		case fn = <-p.work:
			p.waiting.Add(-1)
			fn()
			t.Reset(p.idle)
		case <-t.C:
			p.waiting.Add(-1)
			return
		}
	}
}

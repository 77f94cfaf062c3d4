package gopool_test

import (
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/gopool"
)

// Functions given one after the other run on one goroutine; given at
// once, each runs without waiting for another.
//
// "One" is at most a few: a goroutine counts itself waiting just before
// it blocks to receive, and a function given in between starts another
// goroutine rather than wait (Go never blocks). Once two wait, one of
// them is always ready, so the count stops growing.
func TestPoolReusesAndNeverQueues(t *testing.T) {
	t.Parallel()
	p := gopool.New(gopool.WithIdle(time.Minute))
	for range 100 {
		done := make(chan struct{})
		p.Go(func() { close(done) })
		<-done
		waitFor(t, func() bool { return p.Waiting() >= 1 })
	}
	if n := p.Started(); n > 3 {
		t.Fatalf("100 functions one after the other started %d goroutines, want 1 (at most 3)", n)
	}

	// 50 functions that all block until all 50 run: a pool that queued
	// one behind another would never release them.
	const n = 50
	var started, release sync.WaitGroup
	started.Add(n)
	release.Add(1)
	for range n {
		p.Go(func() {
			started.Done()
			release.Wait()
		})
	}
	ok := make(chan struct{})
	go func() { started.Wait(); close(ok) }()
	select {
	case <-ok:
	case <-time.After(10 * time.Second):
		t.Fatal("functions given at once did not all run at once")
	}
	release.Done()
	if got := p.Started(); got < n {
		t.Fatalf("50 functions at once ran on %d goroutines", got)
	}
	// Every goroutine waits again (none idled out yet).
	waitFor(t, func() bool { return p.Waiting() == p.Started() })
}

// A goroutine that has waited its idle time exits.
func TestPoolIdleExit(t *testing.T) {
	t.Parallel()
	p := gopool.New(gopool.WithIdle(20 * time.Millisecond))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		p.Go(func() { time.Sleep(5 * time.Millisecond); wg.Done() })
	}
	wg.Wait()
	waitFor(t, func() bool { return p.Waiting() == 0 })
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
	if got := p.Started(); got != 9 {
		t.Fatalf("started %d goroutines, want 8 and one more after they exited", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// recurse uses about depth × 1 KiB of stack.
//
//go:noinline
func recurse(depth int) byte {
	var buf [1 << 10]byte
	buf[depth%len(buf)] = byte(depth)
	if depth == 0 {
		return buf[0]
	}
	return recurse(depth-1) + buf[depth%len(buf)]
}

// BenchmarkGo compares a pool with the go statement for a handler that
// needs a 32 KiB stack (a message handler through NATS, a codec and a
// grain's receive goes about that deep).
func BenchmarkGo(b *testing.B) {
	deep := func() { _ = recurse(32) }
	b.Run("go", func(b *testing.B) {
		var wg sync.WaitGroup
		for b.Loop() {
			wg.Add(1)
			go func() { deep(); wg.Done() }()
			wg.Wait()
		}
	})
	b.Run("pool", func(b *testing.B) {
		p := gopool.New()
		var wg sync.WaitGroup
		for b.Loop() {
			wg.Add(1)
			p.Go(func() { deep(); wg.Done() })
			wg.Wait()
		}
	})
}

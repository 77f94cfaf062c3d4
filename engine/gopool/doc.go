// Package gopool runs functions on goroutines that outlive them.
//
// A Go goroutine starts with a small stack and grows it by copying as its
// calls go deeper. A handler that runs on a fresh goroutine per message
// (a function call served by a worker, a grain's mailbox run) pays that
// growth on every message: in the turn bench it was 7 % of the CPU
// (runtime.copystack). A [Pool] keeps a goroutine that finished a
// function waiting a while for the next one, so the stack it grew is used
// again. A function is never queued: when no goroutine is waiting, [Pool.Go]
// starts one, exactly as the go statement would.
//
//	p := gopool.New(gopool.WithIdle(10 * time.Second))
//	p.Go(func() { handle(msg) })
//
// A panic in a function ends the process as it would on its own goroutine.
package gopool

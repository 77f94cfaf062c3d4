// Command iii is the one binary of iii on NATS: `iii up` runs a whole node
// (embedded nats-server, the engine's functions and the worker stack) in one
// process; the other commands are clients of a running node.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
	// Cron time zones resolve on a machine with no zoneinfo too. A node
	// reads its system's zoneinfo first, so nodes whose system tzdata
	// differ may compute different ticks for a zone whose rules changed
	// (docs/OPERATIONS.md, cron).
	_ "time/tzdata"

	"github.com/iii-on-nats/iii/engine/wire"
)

func main() {
	ctx, stop := stopOnSignal(func(code int) {
		fmt.Fprintln(os.Stderr, "iii: second signal: exiting without finishing the shutdown")
		os.Exit(code)
	})
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			body, _ := wire.JSON.Marshal(wire.Envelope{Error: we})
			fmt.Fprintln(terminal(os.Stderr), string(body))
		} else {
			fmt.Fprintln(terminal(os.Stderr), "iii:", err)
		}
		os.Exit(1)
	}
}

// stopOnSignal returns a context that ends at the first SIGINT or SIGTERM
// (the command then stops cleanly, which may take a while: a node drains
// its sessions) and calls exit at the second one, with 128 + the signal's
// number as a shell reports a process killed by it: an operator who
// presses Ctrl-C again, or a supervisor that sends SIGTERM again, means
// now. (signal.NotifyContext kept catching the signal after the first,
// so a second one did nothing until the whole stop budget ran out.) stop
// releases the signals.
//
// A second signal within secondSignalAfter of the first is the same stop
// delivered twice (a wrapper such as timeout(1) or a shell script that
// forwards the signal to a process group that also got it), not an
// operator's "now".
// secondSignalAfter is how long after the first a signal must come to
// force the exit.
const secondSignalAfter = 300 * time.Millisecond

func stopOnSignal(exit func(code int)) (context.Context, func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		first := time.Now()
		for {
			select {
			case s := <-sigs:
				if time.Since(first) < secondSignalAfter {
					continue // the same stop, delivered twice
				}
				code := 1
				if n, ok := s.(syscall.Signal); ok {
					code = 128 + int(n)
				}
				exit(code)
				return
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

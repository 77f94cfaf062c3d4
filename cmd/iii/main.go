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
	_ "time/tzdata" // every node parses cron time zones with the same rules

	"github.com/iii-on-nats/iii/engine/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			body, _ := wire.JSON.Marshal(wire.Envelope{Error: we})
			fmt.Fprintln(os.Stderr, string(body))
		} else {
			fmt.Fprintln(os.Stderr, "iii:", err)
		}
		os.Exit(1)
	}
}

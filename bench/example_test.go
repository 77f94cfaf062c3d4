package bench_test

import (
	"context"
	"fmt"
	"os"

	"github.com/iii-on-nats/iii/bench"
)

// Two sessions of two turns each, without the KV phase, and the storage
// floor of the same turns: only their stored writes.
func Example() {
	dir, err := os.MkdirTemp("", "bench-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	res, err := bench.Run(context.Background(), bench.Config{Sessions: 2, Turns: 2, SkipKV: true, Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("turns:", res.Turns.Turns, "failed:", res.Turns.Failed)
	fmt.Println("stored writes per turn > 0:", res.Turns.PerTurn.Writes > 0)
	for _, f := range res.Floor {
		fmt.Println("floor", f.Plan, f.WritesPerTurn, "writes a turn, measured:", f.TurnsPerSec > 0)
	}
	// Output:
	// turns: 4 failed: 0
	// stored writes per turn > 0: true
	// floor turn 26 writes a turn, measured: true
	// floor contract 24 writes a turn, measured: true
	// floor lean 14 writes a turn, measured: true
}

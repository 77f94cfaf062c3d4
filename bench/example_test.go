package bench_test

import (
	"context"
	"fmt"
	"os"

	"github.com/iii-on-nats/iii/bench"
)

// Two sessions of two turns each, without the KV phase.
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
	// Output:
	// turns: 4 failed: 0
	// stored writes per turn > 0: true
}

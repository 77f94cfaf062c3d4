package heapfloor_test

import (
	"fmt"

	"github.com/iii-on-nats/iii/engine/heapfloor"
)

// A node arms the floor at start-up and disarms it when it stops.
func ExampleStart() {
	stop := heapfloor.Start(heapfloor.WithFloor(heapfloor.DefaultFloor))
	defer stop()
	fmt.Println("armed")
	// Output: armed
}

// With 32 MiB live and a 128 MiB floor, the next collection comes at
// 32 + 128 MiB (GC percent 400), not at 64 MiB; with 500 MiB live the
// default (100) is already beyond the floor.
func ExamplePercent() {
	fmt.Println(heapfloor.Percent(32<<20, 128<<20, 100))
	fmt.Println(heapfloor.Percent(500<<20, 128<<20, 100))
	// Output:
	// 400
	// 100
}

package gopool_test

import (
	"fmt"
	"sync"

	"github.com/iii-on-nats/iii/engine/gopool"
)

func Example() {
	p := gopool.New()
	var wg sync.WaitGroup
	results := make([]int, 3)
	for i := range results {
		wg.Add(1)
		p.Go(func() {
			defer wg.Done()
			results[i] = i * i
		})
	}
	wg.Wait()
	fmt.Println(results)
	// Output: [0 1 4]
}

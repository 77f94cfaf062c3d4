package freeport_test

import (
	"fmt"

	"github.com/iii-on-nats/iii/cluster/freeport"
)

// Three route ports for a three-node cluster on loopback, picked before
// any node starts.
func ExampleLoopback() {
	ports, err := freeport.Loopback(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(ports), ports[0] != ports[1] && ports[1] != ports[2] && ports[0] != ports[2])
	// Output: 3 true
}

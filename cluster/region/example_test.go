package region_test

import (
	"fmt"

	"github.com/iii-on-nats/iii/cluster/region"
)

// Which streams are kept in other regions, and what their mirrors are called.
func ExampleMirrorName() {
	for _, s := range []string{"KV_iii-turn-state", "III_EVENTS", "KV_orders"} {
		if region.DefaultFilter(s) {
			fmt.Println(s, "->", region.MirrorName(s, "eu-west"))
		} else {
			fmt.Println(s, "-> not ours")
		}
	}
	fmt.Println(region.ValidRegion("eu.west"))
	// Output:
	// KV_iii-turn-state -> KV_iii-turn-state_eu-west
	// III_EVENTS -> III_EVENTS_eu-west
	// KV_orders -> not ours
	// region: invalid region: "eu.west" may hold only letters, digits, '_' and '-'
}

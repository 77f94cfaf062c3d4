package enginetest

import (
	"fmt"
	"net"
	"testing"
)

// TestFreePorts: distinct ports, each bindable once released, below the
// kernel's ephemeral range where it is known.
func TestFreePorts(t *testing.T) {
	for _, n := range []int{1, 6, 40} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ports := FreePorts(t, n)
			if len(ports) != n {
				t.Fatalf("got %d ports, want %d", len(ports), n)
			}
			lo := ephemeralLow()
			seen := map[int]bool{}
			for _, p := range ports {
				if seen[p] {
					t.Fatalf("port %d picked twice", p)
				}
				seen[p] = true
				if lo > freePortFloor && (p < freePortFloor || p >= lo) {
					t.Errorf("port %d outside [%d, %d)", p, freePortFloor, lo)
				}
				l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
				if err != nil {
					t.Fatalf("port %d not free: %v", p, err)
				}
				_ = l.Close()
			}
		})
	}
}

package freeport

import (
	"fmt"
	"net"
	"testing"
)

// TestLoopback: distinct ports, each bindable once released, below the
// kernel's ephemeral range where it is known.
func TestLoopback(t *testing.T) {
	for _, n := range []int{1, 6, 40} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ports, err := Loopback(n)
			if err != nil {
				t.Fatal(err)
			}
			if len(ports) != n {
				t.Fatalf("got %d ports, want %d", len(ports), n)
			}
			lo := EphemeralLow()
			seen := map[int]bool{}
			for _, p := range ports {
				if seen[p] {
					t.Fatalf("port %d picked twice", p)
				}
				seen[p] = true
				if lo > Floor && (p < Floor || p >= lo) {
					t.Errorf("port %d outside [%d, %d)", p, Floor, lo)
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

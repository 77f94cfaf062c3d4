package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Floor is the lowest port [Loopback] picks: above the registered ports
// services commonly listen on.
const Floor = 20000

// Loopback picks n distinct free loopback TCP ports and releases them.
// Every listener stays open until all are picked, so the n are distinct.
func Loopback(n int) ([]int, error) {
	ports := make([]int, 0, n)
	lo := EphemeralLow()
	for attempts := 0; len(ports) < n; attempts++ {
		addr := "127.0.0.1:0"
		if lo > Floor && attempts < 100*n {
			addr = fmt.Sprintf("127.0.0.1:%d", Floor+rand.IntN(lo-Floor))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // taken: pick another
			}
			return nil, fmt.Errorf("freeport: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// EphemeralLow is the first port of the kernel's ephemeral range, 0 when
// unknown.
func EphemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}

//go:build !unix

package bench

import "time"

// cpuTime is unknown here: CPU figures come out 0.
func cpuTime() time.Duration { return 0 }

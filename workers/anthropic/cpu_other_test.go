//go:build !unix

package anthropic_test

import "time"

// cpuTime is unknown here: CPU figures come out 0.
func cpuTime() time.Duration { return 0 }

package bench

import (
	"slices"
	"testing"
	"time"
)

func TestSplitFirstTurns(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	// Two sessions of three turns; session 1's last turn did not complete.
	lat := []time.Duration{10 * ms, 2 * ms, 3 * ms, 20 * ms, 4 * ms, 0}
	first, later := splitFirstTurns(lat, 2, 3)
	if !slices.Equal(first, []time.Duration{10 * ms, 20 * ms}) || !slices.Equal(later, []time.Duration{2 * ms, 3 * ms, 4 * ms}) {
		t.Errorf("first %v, later %v", first, later)
	}
}

//go:build race

package sessiontree

// raceEnabled: the race detector is on (it slows every read and
// changes what the heap holds).
const raceEnabled = true

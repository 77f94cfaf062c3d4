package membership_test

import (
	"strings"
	"testing"
)

// Child members run under the race detector too, and with one member per
// process protoactor-go still races inside itself whenever the topology
// changes while gossip or remoting reads its state without a lock. Those
// reports are classified here against an explicit list of upstream
// functions that read shared state unsynchronised (docs/UPSTREAM.md); every
// other race fails the test.

// upstreamUnsynced are protoactor-go functions that read state other
// goroutines write, without the lock the writer holds.
var upstreamUnsynced = []string{
	// remote/blocklist.go: IsBlocked and BlockedMembers skip bl.mu.
	"github.com/asynkron/protoactor-go/remote.(*BlockList).IsBlocked",
	"github.com/asynkron/protoactor-go/remote.(*BlockList).BlockedMembers",
	// Reads the block list through Cluster.GetBlockedMembers and
	// BlockList.BlockedMembers, both inlined out of the race report's
	// stack (CI saw it once, stop 37).
	"github.com/asynkron/protoactor-go/cluster.(*MemberList).getTopologyChanges",
	// cluster/member_list.go: these read ml.members without ml.mutex.
	"github.com/asynkron/protoactor-go/cluster.(*MemberList).ContainsMemberID",
	"github.com/asynkron/protoactor-go/cluster.(*MemberList).Members",
	"github.com/asynkron/protoactor-go/cluster.(*MemberList).Length",
	// remote/endpoint_reader.go: suspend writes s.suspended (on
	// Remote.Shutdown) while Receive reads it.
	"github.com/asynkron/protoactor-go/remote.(*endpointReader).suspend",
	// remote/endpoint_manager.go: stop writes em.stopped and
	// em.connections while endpoint writers read them.
	"github.com/asynkron/protoactor-go/remote.(*endpointManager).stop",
	// cluster/informer.go: setKey updates the gossip state in place while
	// the endpoint writer still serialises the gossip message that shares
	// it (the reading side is in google.golang.org/protobuf).
	"github.com/asynkron/protoactor-go/cluster.setKey",
	// cluster/identitylookup/disthash/manager.go: Get reads pm.rdv, which
	// onClusterTopology replaces without a lock.
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash.(*Manager).Get",
}

const (
	upstreamPkg = "github.com/asynkron/protoactor-go/"
	ourModule   = "github.com/iii-on-nats/iii/"
)

// raceReport is one "WARNING: DATA RACE" block: the function stacks of
// its two accesses (innermost first).
type raceReport struct {
	text   string
	stacks [][]string
}

// parseRaces splits a child's stderr into race reports.
func parseRaces(out string) []raceReport {
	var reps []raceReport
	var cur *raceReport
	inStack := false
	for _, line := range strings.Split(out, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == "WARNING: DATA RACE":
			reps = append(reps, raceReport{})
			cur = &reps[len(reps)-1]
			inStack = false
		case cur == nil:
			continue
		case t == "==================":
			cur, inStack = nil, false
			continue
		case strings.HasPrefix(t, "Write at") || strings.HasPrefix(t, "Read at") ||
			strings.HasPrefix(t, "Previous write at") || strings.HasPrefix(t, "Previous read at"):
			cur.stacks = append(cur.stacks, nil)
			inStack = true
		case t == "" || strings.HasPrefix(t, "Goroutine"):
			inStack = false
		case inStack && strings.HasSuffix(t, ")") && !strings.HasPrefix(t, "/"):
			fn := t[:strings.LastIndexByte(t, '(')]
			cur.stacks[len(cur.stacks)-1] = append(cur.stacks[len(cur.stacks)-1], fn)
		}
		if cur != nil {
			cur.text += line + "\n"
		}
	}
	return reps
}

// top is the innermost frame outside the runtime.
func top(stack []string) string {
	for _, f := range stack {
		if !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "sync/atomic.") {
			return f
		}
	}
	return ""
}

// knownUpstream reports whether r is one of the listed upstream races:
// neither access is made by this module's code (the innermost frames are
// in protoactor-go or the libraries it calls) and one of them runs in an
// [upstreamUnsynced] function. It returns that function.
func (r raceReport) knownUpstream() (string, bool) {
	if len(r.stacks) != 2 {
		return "", false
	}
	for _, s := range r.stacks {
		if t := top(s); t == "" || strings.HasPrefix(t, ourModule) {
			return "", false
		}
	}
	for _, s := range r.stacks {
		for _, f := range s {
			for _, u := range upstreamUnsynced {
				if f == u {
					return strings.TrimPrefix(f, upstreamPkg), true
				}
			}
		}
	}
	return "", false
}

func TestRaceClassifier(t *testing.T) {
	t.Parallel()
	const known = `==================
WARNING: DATA RACE
Write at 0x00c0002c20b8 by goroutine 43:
  github.com/asynkron/protoactor-go/remote.(*BlockList).Block()
      /root/go/pkg/mod/github.com/asynkron/protoactor-go@v0/remote/blocklist.go:37 +0x11a
  github.com/iii-on-nats/iii/cluster/membership.(*Provider).watch()
      /work/main/cluster/membership/provider.go:337 +0x711

Previous read at 0x00c0002c20b8 by goroutine 41:
  github.com/asynkron/protoactor-go/remote.(*BlockList).IsBlocked()
      /root/go/pkg/mod/github.com/asynkron/protoactor-go@v0/remote/blocklist.go:44 +0xe4

Goroutine 43 (running) created at:
  github.com/asynkron/protoactor-go/actor.goroutineDispatcher.Schedule()
==================
`
	const ours = `==================
WARNING: DATA RACE
Read at 0x00c0005abdf8 by goroutine 25:
  runtime.raceread()
      <autogenerated>:1 +0x1e
  github.com/iii-on-nats/iii/cluster/membership.(*Provider).Accepting()
      /work/main/cluster/membership/provider.go:1

Previous write at 0x00c0005abdf8 by goroutine 22:
  github.com/asynkron/protoactor-go/remote.(*BlockList).IsBlocked()
      /x.go:1
==================
`
	const unlisted = `==================
WARNING: DATA RACE
Read at 0x1 by goroutine 25:
  github.com/asynkron/protoactor-go/remote.(*endpointWriter).Receive()
      /x.go:1

Previous write at 0x1 by goroutine 22:
  github.com/asynkron/protoactor-go/remote.(*endpointWriter).initialize()
      /x.go:1
==================
`
	const library = `==================
WARNING: DATA RACE
Read at 0x00c000006368 by goroutine 43:
  github.com/asynkron/gofun/set.(*ImmutableSet[go.shape.string]).Contains()
      /x.go:1
  github.com/asynkron/protoactor-go/remote.(*BlockList).IsBlocked()
      /x.go:1

Previous write at 0x00c000006368 by goroutine 39:
  github.com/asynkron/gofun/set.(*ImmutableSet[go.shape.string]).Clone()
      /x.go:1
  github.com/asynkron/protoactor-go/remote.(*BlockList).Block()
      /x.go:1
==================
`
	// The block list read by a topology update, its getters inlined: the
	// read comes through our provider's watch, but no frame of ours is on
	// top of either access.
	const inlined = `==================
WARNING: DATA RACE
Read at 0x00c00010a270 by goroutine 40:
  github.com/asynkron/gofun/set.(*ImmutableSet[go.shape.string]).ToSlice()
      /x.go:55 +0x117
  github.com/asynkron/protoactor-go/cluster.(*MemberList).getTopologyChanges()
      /x.go:198 +0x1d
  github.com/asynkron/protoactor-go/cluster.(*MemberList).UpdateClusterTopology()
      /x.go:137 +0xe9
  github.com/iii-on-nats/iii/cluster/membership.(*Provider).handle()
      /x.go:528 +0x843

Previous write at 0x00c00010a270 by goroutine 30:
  github.com/asynkron/gofun/set.(*ImmutableSet[go.shape.string]).Clone()
      /x.go:59 +0xb5
  github.com/asynkron/gofun/set.(*ImmutableSet[go.shape.string]).AddRange()
      /x.go:27 +0x3c
  github.com/asynkron/protoactor-go/remote.(*BlockList).Block()
      /x.go:1
==================
`
	for _, tc := range []struct {
		name string
		out  string
		want []bool
	}{
		{"library frame on top", library, []bool{true}},
		{"block list read by a topology update, getters inlined", inlined, []bool{true}},
		{"none", "some log line\n", nil},
		{"known", "log\n" + known, []bool{true}},
		{"our frame on top", ours, []bool{false}},
		{"upstream but not listed", unlisted, []bool{false}},
		{"two", known + ours, []bool{true, false}},
	} {
		reps := parseRaces(tc.out)
		if len(reps) != len(tc.want) {
			t.Fatalf("%s: %d reports, want %d", tc.name, len(reps), len(tc.want))
		}
		for i, r := range reps {
			if _, ok := r.knownUpstream(); ok != tc.want[i] {
				t.Errorf("%s #%d: known = %v, want %v (stacks %q)", tc.name, i, ok, tc.want[i], r.stacks)
			}
		}
	}
}

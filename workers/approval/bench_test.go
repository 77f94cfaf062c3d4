package approval

import (
	"context"
	"fmt"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
)

// BenchmarkResolve parks a call and resolves it over the bus (msgpack), as
// a human's client would: one KV create plus one request per op.
func BenchmarkResolve(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	rec := record(b, "s1", "c", "fs::write", map[string]any{"path": "/x"}, 1)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		r := rec
		r.FunctionCallID = fmt.Sprintf("c%d", i)
		park(b, f.approvals, r)
		if err := resolve(ctx, f.e, ResolveRequest{SessionID: "s1", FunctionCallID: r.FunctionCallID, Decision: agent.DecisionAllow, ArgsHash: r.ArgsHash}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkListPending lists a bucket of pending calls over the bus.
func BenchmarkListPending(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		for _, scope := range []string{"all", "session"} {
			b.Run(fmt.Sprintf("pending=%d,scope=%s", n, scope), func(b *testing.B) {
				f := newFixture(b)
				for i := range n {
					park(b, f.approvals, record(b, fmt.Sprintf("s%d", i%10), fmt.Sprintf("c%d", i), "fs::write", map[string]any{"path": "/x"}, int64(i)))
				}
				sid, want := "", n
				if scope == "session" {
					sid, want = "s3", n/10
				}
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					resp, err := engine.Call[ListPendingResponse](ctx, f.e, ListPendingFunction, ListPendingRequest{SessionID: sid})
					if err != nil {
						b.Fatal(err)
					}
					if len(resp.Pending) != want {
						b.Fatalf("%d pending, want %d", len(resp.Pending), want)
					}
				}
			})
		}
	}
}

// BenchmarkSettingsSet writes one session's settings over the bus (a read
// and a compare-and-set per op).
func BenchmarkSettingsSet(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	m := agent.ApprovalAuto
	l := []string{"fs::read", "git::*"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := engine.Call[agent.ApprovalSettings](ctx, f.e, SettingsSetFunction, SettingsSetRequest{SessionID: "s1", Mode: &m, AlwaysAllow: &l}); err != nil {
			b.Fatal(err)
		}
	}
}

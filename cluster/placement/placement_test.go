package placement_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster/placement"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// TestCluster runs three real members, each in its own process, that
// share one embedded nats-server. Starting a member costs 1 s (upstream
// sleep), so the subtests share them and run in order: the last ones
// drain and crash members.
func TestCluster(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	js, err := jetstream.New(enginetest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ms := spawn(t, ns, false, "m0", "m1", "m2")
	byAddr := map[string]*proc{}
	for _, m := range ms {
		byAddr[m.addr] = m
	}
	ownerOf := func(addr string) string {
		if m := byAddr[addr]; m != nil {
			return m.id
		}
		return "unknown member " + addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, subjects.GrainsBucket)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error { // every member sees the others
		for i, m := range ms {
			id := fmt.Sprintf("warmup-%d", i)
			if _, _, err := m.call(id, "inc"); err != nil {
				return err
			}
		}
		return nil
	})

	t.Run("OneActivationUnderConcurrentFirstCalls", func(t *testing.T) {
		const ids, callsPerMember = 5, 6
		type answer struct {
			addr string
			n    int
		}
		var wg sync.WaitGroup
		answers := make([]chan answer, ids)
		for i := range ids {
			answers[i] = make(chan answer, len(ms)*callsPerMember)
			for _, m := range ms {
				for range callsPerMember {
					wg.Add(1)
					go func() {
						defer wg.Done()
						addr, n, err := m.call(fmt.Sprintf("one-%d", i), "inc")
						if err != nil {
							t.Error(err)
						}
						answers[i] <- answer{addr, n}
					}()
				}
			}
		}
		wg.Wait()
		for i := range ids {
			close(answers[i])
			id := fmt.Sprintf("one-%d", i)
			seen := map[int]bool{}
			var host string
			for a := range answers[i] {
				if host == "" {
					host = a.addr
				}
				if a.addr != host {
					t.Fatalf("%s answered by %s and %s: two activations", id, host, a.addr)
				}
				if seen[a.n] {
					t.Fatalf("%s: count %d twice: two activations", id, a.n)
				}
				seen[a.n] = true
			}
			for n := 1; n <= len(ms)*callsPerMember; n++ {
				if !seen[n] {
					t.Fatalf("%s: count %d missing (counts %v)", id, n, seen)
				}
			}
			if got := owner(t, js, id); got != ownerOf(host) {
				t.Fatalf("%s: owner %q, answered by %s", id, got, ownerOf(host))
			}
		}
	})

	t.Run("ContendedClaims", func(t *testing.T) {
		// Every member sees only itself as a candidate, so first calls from
		// all members claim concurrently on three placement actors: two
		// claims must lose and their callers find the winner.
		for _, m := range ms {
			m.accept(t, "self")
		}
		defer func() {
			for _, m := range ms {
				m.accept(t, "")
			}
		}()
		for i := range 5 {
			id := fmt.Sprintf("contended-%d", i)
			var wg sync.WaitGroup
			addrs := make([]string, len(ms))
			counts := make([]int, len(ms))
			for j, m := range ms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var err error
					if addrs[j], counts[j], err = m.call(id, "inc"); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			seen := map[int]bool{}
			for j := range ms {
				if addrs[j] != addrs[0] {
					t.Fatalf("%s answered by %v: two activations", id, addrs)
				}
				seen[counts[j]] = true
			}
			if len(seen) != len(ms) {
				t.Fatalf("%s counts %v: not one activation", id, counts)
			}
		}
	})

	t.Run("Spread", func(t *testing.T) {
		hosts := map[string]int{}
		for i := range 30 {
			id := fmt.Sprintf("spread-%d", i)
			addr, n := ms[i%len(ms)].mustCall(t, id)
			if n != 1 {
				t.Fatalf("%s: first call counted %d", id, n)
			}
			hosts[addr]++
			if got := owner(t, js, id); got != ownerOf(addr) {
				t.Fatalf("%s: owner %q, answered by %s", id, got, ownerOf(addr))
			}
		}
		if len(hosts) < 2 {
			t.Fatalf("30 identities all on %v", hosts)
		}
		t.Logf("30 identities over members: %v", hosts)
		total := 0
		for _, m := range ms {
			total += m.local(t)
		}
		if want := len(ms) + 5 + 5 + 30; total != want {
			t.Fatalf("Local() sums to %d, want %d", total, want)
		}
	})

	t.Run("Accepting", func(t *testing.T) {
		for _, m := range ms {
			m.accept(t, "not:"+ms[0].id)
		}
		defer func() {
			for _, m := range ms {
				m.accept(t, "")
			}
		}()
		for i := range 10 {
			if addr, _ := ms[0].mustCall(t, fmt.Sprintf("accept-%d", i)); addr == ms[0].addr {
				t.Fatalf("accept-%d placed on the member that does not accept", i)
			}
		}
		// Grains already activated stay where they are.
		for i := range 5 {
			id := fmt.Sprintf("one-%d", i)
			before := owner(t, js, id)
			if _, n := ms[1].mustCall(t, id); n != len(ms)*6+1 {
				t.Fatalf("%s moved: count %d", id, n)
			}
			if after := owner(t, js, id); after != before {
				t.Fatalf("%s moved from %s to %s", id, before, after)
			}
		}
	})

	t.Run("Passivation", func(t *testing.T) {
		id := "passivating"
		addr, n := ms[0].mustCall(t, id)
		if n != 1 {
			t.Fatalf("first call counted %d", n)
		}
		if got := owner(t, js, id); got != ownerOf(addr) {
			t.Fatalf("owner %q, answered by %s", got, ownerOf(addr))
		}
		if _, n, err := ms[1].call(id, "passivate"); err != nil || n != 2 {
			t.Fatalf("passivate: %d, %v", n, err)
		}
		enginetest.Eventually(t, 2*time.Second, func() error {
			if got := owner(t, js, id); got != "" {
				return fmt.Errorf("owner %q after passivation", got)
			}
			return nil
		})
		for i, m := range ms { // stale PIDs in every member's cache
			if _, n := m.mustCall(t, id); n != i+1 {
				t.Fatalf("call %d after re-activation counted %d", i+1, n)
			}
		}
	})

	t.Run("StaleKeys", func(t *testing.T) {
		// Owned by a member that is gone: taken over.
		if _, err := kv.Put(ctx, placement.Key(kind, "ghosted"), []byte(`{"member":"ghost"}`)); err != nil {
			t.Fatal(err)
		}
		addr, n := ms[0].mustCall(t, "ghosted")
		if got := owner(t, js, "ghosted"); n != 1 || got != ownerOf(addr) {
			t.Fatalf("ghosted: count %d, owner %q, host %s", n, got, addr)
		}
		// Not an owner record: taken over.
		if _, err := kv.Put(ctx, placement.Key(kind, "garbled"), []byte(`}{`)); err != nil {
			t.Fatal(err)
		}
		if _, n := ms[0].mustCall(t, "garbled"); n != 1 {
			t.Fatalf("garbled: count %d", n)
		}
		// Owned by a live member without an activation (a release that
		// failed): that member activates it.
		if _, err := kv.Put(ctx, placement.Key(kind, "orphan"), []byte(`{"member":"`+ms[2].id+`"}`)); err != nil {
			t.Fatal(err)
		}
		if addr, n := ms[0].mustCall(t, "orphan"); addr != ms[2].addr || n != 1 {
			t.Fatalf("orphan: answered by %s count %d, want %s", addr, n, ms[2].addr)
		}
	})

	t.Run("Client", func(t *testing.T) {
		c := spawn(t, ns, true, "client")[0]
		enginetest.Eventually(t, 5*time.Second, func() error {
			_, _, err := c.call("from-client", "inc")
			return err
		})
		if addr, n := ms[0].mustCall(t, "from-client"); n != 2 || byAddr[addr] == nil {
			t.Fatalf("from-client: %s count %d", addr, n)
		}
		if c.local(t) != 0 {
			t.Fatal("a client hosts grains")
		}
		var r ctlResp
		if err := c.req("drain", ctlReq{Timeout: int64(time.Second)}, &r, 5*time.Second); r.Err != placement.ErrNotMember.Error() {
			t.Fatalf("client Drain: %v", err)
		}
	})

	t.Run("Drain", func(t *testing.T) {
		d := ms[2]
		// Place only once the caller sees every member (a loaded machine
		// can lag the membership), and enough identities that the
		// rendezvous hash puts some on d ((2/3)^48 ≈ 4e-9 that none).
		enginetest.Eventually(t, 10*time.Second, func() error {
			if n := ms[0].do(t, "members", ctlReq{}).N; n != len(ms) {
				return fmt.Errorf("member 0 sees %d members", n)
			}
			return nil
		})
		var owned []string
		for i := range 48 {
			id := fmt.Sprintf("drain-%d", i)
			if addr, _ := ms[0].mustCall(t, id); addr == d.addr {
				owned = append(owned, id)
			}
		}
		if len(owned) == 0 {
			t.Fatal("no identity placed on the member to drain")
		}
		local := d.local(t)
		start := time.Now()
		d.do(t, "drain", ctlReq{Timeout: int64(3 * time.Second)})
		t.Logf("drained %d grains in %v", local, time.Since(start))
		if got := d.drained(t); got != local {
			t.Fatalf("%d grains got the drain message, %d were active", got, local)
		}
		if n := d.local(t); n != 0 {
			t.Fatalf("Local() = %d after drain", n)
		}
		for _, id := range owned {
			if got := owner(t, js, id); got != "" {
				t.Fatalf("%s still owned by %q after drain", id, got)
			}
			if addr, n := ms[0].mustCall(t, id); addr == d.addr || n != 1 {
				t.Fatalf("%s after drain: %s count %d", id, addr, n)
			}
		}
		for i := range 10 { // new grains avoid the drained member, wherever asked
			if addr, _ := d.mustCall(t, fmt.Sprintf("after-drain-%d", i)); addr == d.addr {
				t.Fatalf("after-drain-%d activated on the drained member", i)
			}
		}
		d.do(t, "drain", ctlReq{Timeout: int64(time.Second)}) // idempotent
		if err := d.stop(); err != nil {                      // leaves the cluster
			t.Fatal(err)
		}
	})

	t.Run("Failover", func(t *testing.T) {
		dead, survivor := ms[1], ms[0]
		var owned []string
		for i := range 12 {
			id := fmt.Sprintf("failover-%d", i)
			if addr, _ := survivor.mustCall(t, id); addr == dead.addr {
				owned = append(owned, id)
			}
		}
		if len(owned) == 0 {
			t.Fatal("no identity placed on the member to crash")
		}
		// Crash: the remote stops answering, nothing is released, and the
		// membership entry expires.
		dead.do(t, "freeze", ctlReq{})
		start := time.Now()
		mkv, err := js.KeyValue(ctx, membersBucket)
		if err != nil {
			t.Fatal(err)
		}
		if err := mkv.Delete(ctx, dead.id); err != nil {
			t.Fatal(err)
		}
		enginetest.Eventually(t, 10*time.Second, func() error {
			if n := survivor.do(t, "members", ctlReq{}).N; n != 1 {
				return fmt.Errorf("survivor sees %d members", n)
			}
			return nil
		})
		left := time.Since(start)
		for _, id := range owned {
			addr, n := survivor.mustCall(t, id)
			if addr != survivor.addr || n != 1 {
				t.Fatalf("%s after failover: %s count %d", id, addr, n)
			}
			if got := owner(t, js, id); got != survivor.id {
				t.Fatalf("%s owner %q after failover", id, got)
			}
		}
		t.Logf("survivor saw the member leave after %v; re-activated its %d grains in %v", left, len(owned), time.Since(start)-left)
		// The dead member's late release must not remove the new claims.
		if err := dead.stop(); err != nil {
			t.Fatal(err)
		}
		for _, id := range owned {
			if got := owner(t, js, id); got != survivor.id {
				t.Fatalf("%s owner %q after the dead member's shutdown", id, got)
			}
		}
	})
}

func TestOwner(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	js, err := jetstream.New(enginetest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := placement.Owner(ctx, js, kind, "x"); !errors.Is(err, placement.ErrNoOwner) {
		t.Fatalf("no bucket: %v", err)
	}
	if _, err := placement.New(js); err != nil {
		t.Fatal(err)
	}
	if _, err := placement.New(js); err != nil { // binds the existing bucket
		t.Fatal(err)
	}
	if _, err := placement.New(js, placement.WithReplicas(3)); err != nil { // as it is
		t.Fatal(err)
	}
	if _, err := placement.Owner(ctx, js, kind, "x"); !errors.Is(err, placement.ErrNoOwner) {
		t.Fatalf("no key: %v", err)
	}
	kv, err := js.KeyValue(ctx, subjects.GrainsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id, value, want string
		err             error
	}{
		{"a", `{"member":"m1","address":"127.0.0.1:1"}`, "m1", nil},
		{"a b/c", `{"member":"m2"}`, "m2", nil},
		{"bad", `nope`, "", placement.ErrInvalidRecord},
		{"nomember", `{"address":"x"}`, "", placement.ErrInvalidRecord},
	} {
		if _, err := kv.Put(ctx, placement.Key(kind, tc.id), []byte(tc.value)); err != nil {
			t.Fatal(err)
		}
		got, err := placement.Owner(ctx, js, kind, tc.id)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("Owner(%q) = %q, %v; want %q, %v", tc.id, got, err, tc.want, tc.err)
		}
	}
}

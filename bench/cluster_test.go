package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/enginetest"
)

// The stack's NATS cluster: three servers form one JetStream cluster, and
// the counters merge over the nodes — a stream's writes counted once
// whether it has one replica or three, messages received summed. (The
// whole stack on several nodes runs three proto.actor members in one
// process, which the race detector reports inside protoactor-go and gRPC
// (docs/UPSTREAM.md); BenchmarkTurnsCluster runs it.)
func TestStartClusterCounters(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &stack{dir: t.TempDir(), replicas: 3}
	defer s.close(context.Background())
	if err := s.startCluster(ctx, Config{Nodes: 3}); err != nil {
		t.Fatal(err)
	}
	if len(s.nodes) != 3 || s.node != s.nodes[0] || len(s.servers()) != 3 {
		t.Fatalf("nodes %d, servers %d", len(s.nodes), len(s.servers()))
	}
	for i, n := range s.nodes {
		if got := n.Config().Replicas(); got != 3 {
			t.Errorf("node %d: Replicas() = %d", i+1, got)
		}
	}
	nc, err := s.nodes[2].Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	before, err := snapshot(s.servers())
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []jetstream.StreamConfig{
		{Name: "R1", Subjects: []string{"r1.>"}, Replicas: 1, Storage: jetstream.FileStorage},
		{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3, Storage: jetstream.FileStorage},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		for _, subj := range []string{"r1.x", "r3.x"} {
			if _, err := js.Publish(ctx, subj, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "R3", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	// A fetch may return fewer messages than asked, none at all or "no
	// responders" while a loaded CI machine still elects the new R3
	// consumer's leader: fetch until three are acked.
	waiting := func(err error) bool {
		return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders)
	}
	for acked := 0; acked < 3; {
		if ctx.Err() != nil {
			t.Fatalf("acked %d of 3: %v", acked, ctx.Err())
		}
		batch, err := cons.Fetch(3-acked, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			if !waiting(err) {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for m := range batch.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			acked++
		}
		if err := batch.Error(); err != nil {
			if !waiting(err) {
				t.Fatalf("fetch after %d acked: %v", acked, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Replicas apply the writes and the acks a moment later (seconds
	// when CI's parallel packages load both cores: 5 s once was not
	// enough).
	var after counters
	enginetest.Eventually(t, 30*time.Second, func() error {
		var err error
		if after, err = snapshot(s.servers()); err != nil {
			return err
		}
		if after.lastSeq["R1"] != 5 || after.lastSeq["R3"] != 5 || after.acks != 3 {
			return fmt.Errorf("last seqs %v, acks %d", after.lastSeq, after.acks)
		}
		return nil
	})
	c := perTurn(before, after, 1, 0)
	if c.StreamWrites["R1"] != 5 || c.StreamWrites["R3"] != 5 || c.Acks != 3 {
		t.Errorf("merged counters: %+v (lastSeq %v, acks %d)", c, after.lastSeq, after.acks)
	}
	one, err := snapshot(s.servers()[:1])
	if err != nil {
		t.Fatal(err)
	}
	if c.MsgsIn <= float64(one.msgsIn-before.msgsIn) {
		t.Errorf("msgs in summed over nodes %v, node 1 alone %d", c.MsgsIn, one.msgsIn-before.msgsIn)
	}
}

func TestCompareReplicasConfig(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"one node", Config{Sessions: 1, Turns: 1}},
		{"two nodes", Config{Sessions: 1, Turns: 1, Nodes: 2}},
		{"replicas set", Config{Sessions: 1, Turns: 1, Nodes: 3, Replicas: 3}},
		{"idle only", Config{Idle: 10, Nodes: 3}},
		{"invalid", Config{Sessions: -1, Turns: 1, Nodes: 3}},
	} {
		if _, err := CompareReplicas(t.Context(), tt.cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: CompareReplicas = %v, want ErrInvalidConfig", tt.name, err)
		}
	}
}

func TestReplicaComparisonTable(t *testing.T) {
	t.Parallel()
	c := ReplicaComparison{
		R1:         Result{Nodes: 3, Replicas: 1, Turns: &TurnsResult{Sessions: 2, TurnsPerSession: 2, Turns: 4, TurnsPerSec: 300}},
		R3:         Result{Nodes: 3, Replicas: 3, Turns: &TurnsResult{Sessions: 2, TurnsPerSession: 2, Turns: 4, TurnsPerSec: 120}},
		TurnsRatio: 2.5,
	}
	var b strings.Builder
	if err := c.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== 3 nodes, R1", "== 3 nodes, R3", "3 in one NATS cluster", "streams and buckets R1", "streams and buckets R3",
		"300 (first half", "R1/R3 turns/s ratio: 2.50\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	var one strings.Builder
	if err := (Result{Nodes: 1, Replicas: 1}).WriteTable(&one); err != nil || !strings.Contains(one.String(), "nodes    1, streams and buckets R1") {
		t.Errorf("single node table %v:\n%s", err, one.String())
	}
}

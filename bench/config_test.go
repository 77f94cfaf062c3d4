package bench

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/workers/scripted"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"turns", Config{Sessions: 1, Turns: 1}, true},
		{"idle only", Config{Idle: 10}, true},
		{"nothing", Config{}, false},
		{"sessions without turns", Config{Sessions: 1}, false},
		{"negative sessions", Config{Sessions: -1, Turns: 1}, false},
		{"negative kv puts", Config{Sessions: 1, Turns: 1, KVPuts: -1}, false},
		{"huge value", Config{Sessions: 1, Turns: 1, KVValueSize: 2 << 20}, false},
		// Bounded as sessions and turns are: the KV phase keeps a latency
		// per put and runs a goroutine per writer.
		{"most kv puts", Config{Sessions: 1, Turns: 1, KVPuts: MaxTotalTurns, KVWriters: MaxSessions}, true},
		{"too many kv puts", Config{Sessions: 1, Turns: 1, KVPuts: MaxTotalTurns + 1}, false},
		{"too many kv writers", Config{Sessions: 1, Turns: 1, KVWriters: MaxSessions + 1}, false},
		{"too many idle workers", Config{Idle: 1, IdleWorkers: MaxSessions + 1}, false},
		{"delta size too large", Config{Sessions: 1, Turns: 1, DeltaSize: scripted.MaxDeltaSize + 1}, false},
		// A default idle timeout grows by the idle settle: it must not wrap.
		{"idle settle past a day", Config{Idle: 1, IdleSettle: MaxTimeout + time.Second}, false},
		{"idle settle overflows", Config{Idle: 1, IdleSettle: math.MaxInt64}, false},
		{"turn timeout past a day", Config{Sessions: 1, Turns: 1, TurnTimeout: MaxTimeout + time.Second}, false},
		{"longest timeouts", Config{Idle: MaxSessions, IdleSettle: MaxTimeout, TurnTimeout: MaxTimeout, AckWait: MaxTimeout}, true},
		{"too many sessions", Config{Sessions: MaxSessions + 1, Turns: 1}, false},
		{"too many turns", Config{Sessions: MaxSessions, Turns: MaxSessions}, false},
		{"negative timeout", Config{Idle: 1, IdleTimeout: -time.Second}, false},
		{"negative ack wait", Config{Idle: 1, AckWait: -time.Second}, false},
		{"negative idle settle", Config{Idle: 1, IdleSettle: -time.Second}, false},
		{"idle settle, default idle timeout", Config{Idle: 1, IdleSettle: time.Minute}, true},
		{"idle settle shorter than the idle timeout", Config{Idle: 1, IdleSettle: time.Second, IdleTimeout: 2 * time.Second}, true},
		{"idle settle as long as the idle timeout", Config{Idle: 1, IdleSettle: time.Second, IdleTimeout: time.Second}, false},
		{"one node", Config{Sessions: 1, Turns: 1, Nodes: 1}, true},
		{"one node R1", Config{Sessions: 1, Turns: 1, Nodes: 1, Replicas: 1}, true},
		{"one node R3", Config{Sessions: 1, Turns: 1, Replicas: 3}, false},
		{"two nodes", Config{Sessions: 1, Turns: 1, Nodes: 2}, true},
		{"two nodes R3", Config{Sessions: 1, Turns: 1, Nodes: 2, Replicas: 3}, false},
		{"three nodes", Config{Sessions: 1, Turns: 1, Nodes: 3}, true},
		{"three nodes R1", Config{Sessions: 1, Turns: 1, Nodes: 3, Replicas: 1}, true},
		{"three nodes R2", Config{Sessions: 1, Turns: 1, Nodes: 3, Replicas: 2}, false},
		{"three nodes R3", Config{Sessions: 1, Turns: 1, Nodes: 3, Replicas: 3}, true},
		{"four nodes R4", Config{Sessions: 1, Turns: 1, Nodes: 4, Replicas: 4}, false},
		{"five nodes R5", Config{Sessions: 1, Turns: 1, Nodes: 5, Replicas: 5}, true},
		{"seven nodes R7", Config{Sessions: 1, Turns: 1, Nodes: 7, Replicas: 7}, false},
		{"negative nodes", Config{Sessions: 1, Turns: 1, Nodes: -1}, false},
		{"too many nodes", Config{Sessions: 1, Turns: 1, Nodes: MaxNodes + 1}, false},
		{"negative replicas", Config{Sessions: 1, Turns: 1, Nodes: 3, Replicas: -1}, false},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v does not wrap ErrInvalidConfig", tt.name, err)
		}
	}
	d := Config{Sessions: 1, Turns: 1, KVPuts: 10}.withDefaults()
	if d.KVWriters != 10 || d.KVValueSize != DefaultKVValueSize || d.AckWait != DefaultAckWait || d.IdleTimeout != DefaultIdleTimeout {
		t.Errorf("defaults: %+v", d)
	}
	if s := (Config{Idle: 1000, IdleSettle: DefaultIdleSettle}).withDefaults(); s.IdleTimeout != DefaultIdleTimeout+5*time.Second+DefaultIdleSettle {
		t.Errorf("idle timeout with idle settle: %s", s.IdleTimeout)
	}
	if s := (Config{Idle: MaxSessions, IdleSettle: MaxTimeout}).withDefaults(); s.IdleTimeout <= MaxTimeout {
		t.Errorf("idle timeout with the longest idle settle: %s", s.IdleTimeout)
	}
	if d.Nodes != 1 || d.Replicas != 1 {
		t.Errorf("default nodes %d, replicas %d; want 1, 1", d.Nodes, d.Replicas)
	}
}

func TestConfigReplicas(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		nodes, replicas, want int
	}{
		{0, 0, 1}, {1, 0, 1}, {2, 0, 1}, {3, 0, 3}, {5, 0, 3}, {3, 1, 1}, {5, 5, 5},
	} {
		d := Config{Sessions: 1, Turns: 1, Nodes: tt.nodes, Replicas: tt.replicas}.withDefaults()
		if d.Replicas != tt.want || d.Nodes != max(tt.nodes, 1) {
			t.Errorf("nodes %d, replicas %d: defaults give nodes %d, replicas %d; want replicas %d", tt.nodes, tt.replicas, d.Nodes, d.Replicas, tt.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond
	}
	l := summarize(ds)
	if l.p50 != 50*time.Millisecond || l.p90 != 90*time.Millisecond || l.p99 != 99*time.Millisecond || l.max != 100*time.Millisecond {
		t.Errorf("summary %+v", l)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("empty: %v", got)
	}
	if got := percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("one: %v", got)
	}
	if (summarize(nil) != latencies{}) {
		t.Error("empty summary")
	}
}

func TestRunBadConfig(t *testing.T) {
	t.Parallel()
	if _, err := Run(t.Context(), Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Run(zero) = %v", err)
	}
}

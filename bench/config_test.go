package bench

import (
	"errors"
	"testing"
	"time"
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
		{"too many sessions", Config{Sessions: MaxSessions + 1, Turns: 1}, false},
		{"too many turns", Config{Sessions: MaxSessions, Turns: MaxSessions}, false},
		{"negative timeout", Config{Idle: 1, IdleTimeout: -time.Second}, false},
		{"negative ack wait", Config{Idle: 1, AckWait: -time.Second}, false},
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

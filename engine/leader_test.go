package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

func TestLeaderGet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := enginetest.Engine(t)
	kv, err := e.EnsureKV(ctx, jetstream.KeyValueConfig{Bucket: "lg", History: 2, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	rev1, _ := kv.Put(ctx, "a", []byte("one"))
	rev2, _ := kv.Put(ctx, "a", []byte("two"))
	if _, err := kv.Put(ctx, "gone", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		stream   string
		which    engine.LeaderGet
		data     string
		seq      uint64
		kvOp     string
		notFound error
	}{
		{name: "last by subject", stream: "KV_lg", which: engine.LeaderGet{LastBySubject: "$KV.lg.a"}, data: "two", seq: rev2},
		{name: "by sequence", stream: "KV_lg", which: engine.LeaderGet{Seq: rev1}, data: "one", seq: rev1},
		{name: "deleted key", stream: "KV_lg", which: engine.LeaderGet{LastBySubject: "$KV.lg.gone"}, kvOp: "DEL"},
		{name: "missing key", stream: "KV_lg", which: engine.LeaderGet{LastBySubject: "$KV.lg.none"}, notFound: jetstream.ErrMsgNotFound},
		{name: "missing stream", stream: "KV_nope", which: engine.LeaderGet{Seq: 1}, notFound: jetstream.ErrStreamNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := e.LeaderGet(ctx, tt.stream, tt.which)
			if tt.notFound != nil {
				if !errors.Is(err, tt.notFound) {
					t.Fatalf("err = %v, want %v", err, tt.notFound)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.kvOp != "" {
				if got := m.Header.Get("KV-Operation"); got != tt.kvOp {
					t.Fatalf("KV-Operation %q, want %q", got, tt.kvOp)
				}
				return
			}
			if string(m.Data) != tt.data || m.Sequence != tt.seq {
				t.Fatalf("got %q at %d, want %q at %d", m.Data, m.Sequence, tt.data, tt.seq)
			}
		})
	}
}

package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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

// TestLeaderGetAsksAgain: a stream electing a leader answers a request
// not at all, or unavailable; LeaderGet asks again until the new leader
// answers, within its caller's deadline. A missing message is not asked
// for again. (A server without JetStream, and a responder that plays the
// stream's leader.)
func TestLeaderGetAsksAgain(t *testing.T) {
	defer engine.SetReadAttempt(200 * time.Millisecond)()
	ns := enginetest.RunServer(t, func(o *server.Options) { o.JetStream = false })
	e := enginetest.NewEngine(t, ns)
	nc := enginetest.Connect(t, ns)
	found := `{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"$KV.b.k","seq":7,"data":"aGk=","time":"2026-12-07T00:00:00Z"}}`
	unavailable := `{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","error":{"code":503,"err_code":10008,"description":"JetStream cluster not available"}}`
	missing := `{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","error":{"code":404,"err_code":10037,"description":"no message found"}}`
	for _, tt := range []struct {
		name    string
		answers []string // "" leaves a request unanswered
		want    error
		asked   int
	}{
		{name: "answered at once", answers: []string{found}, asked: 1},
		{name: "unanswered, then answered", answers: []string{"", "", found}, asked: 3},
		{name: "unavailable, then answered", answers: []string{unavailable, found}, asked: 2},
		{name: "missing is not asked again", answers: []string{missing, found}, want: jetstream.ErrMsgNotFound, asked: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var asked atomic.Int32
			sub, err := nc.Subscribe("$JS.API.STREAM.MSG.GET.KV_b", func(m *nats.Msg) {
				n := int(asked.Add(1))
				if a := tt.answers[min(n, len(tt.answers))-1]; a != "" {
					_ = m.Respond([]byte(a))
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m, err := e.LeaderGet(ctx, "KV_b", engine.LeaderGet{LastBySubject: "$KV.b.k"})
			switch {
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("err = %v, want %v", err, tt.want)
			case tt.want == nil && (err != nil || m.Sequence != 7 || string(m.Data) != "hi"):
				t.Fatalf("got %+v, %v", m, err)
			}
			if got := int(asked.Load()); got != tt.asked {
				t.Fatalf("asked %d times, want %d", got, tt.asked)
			}
		})
	}
	// Nobody serves the JetStream API at all: said at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.LeaderGet(ctx, "KV_none", engine.LeaderGet{Seq: 1}); !errors.Is(err, nats.ErrNoResponders) || ctx.Err() != nil {
		t.Fatalf("without JetStream: %v (ctx %v)", err, ctx.Err())
	}
}

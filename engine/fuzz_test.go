package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// FuzzEndpoint drives random payloads, in both codecs, at a live function:
// every request gets a reply, that reply is a success or a coded error from
// the catalog, and the worker keeps serving.
func FuzzEndpoint(f *testing.F) {
	ns := enginetest.RunServer(f)
	e := enginetest.NewEngine(f, ns)
	w, err := e.Worker("fuzz")
	if err != nil {
		f.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "fuzz::echo", Handler: engine.Typed(func(_ context.Context, r echoReq) (echoResp, error) { return echoResp(r), nil })}); err != nil {
		f.Fatal(err)
	}
	nc := enginetest.Connect(f, ns)
	good, _ := wire.Msgpack.Marshal(echoReq{Text: "x", N: 1})
	f.Add(good, true)
	f.Add([]byte(`{"text":"x","n":1}`), false)
	f.Add([]byte(`{"text":5}`), false)
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, true)
	f.Add([]byte("\x00\xff"), false)
	f.Fuzz(func(t *testing.T, data []byte, msgpack bool) {
		msg := nats.NewMsg("iii.fn.fuzz.echo")
		if msgpack {
			msg.Header.Set(wire.HeaderContentType, wire.ContentMsgpack)
		}
		msg.Data = data
		reply, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatalf("no reply: %v", err)
		}
		if werr := wire.Decode(reply); werr != nil {
			if _, ok := wire.Lookup(werr.Code); !ok || werr.Code == wire.CodeInternal {
				t.Fatalf("uncoded or internal error for %q: %v", data, werr)
			}
		}
		if err := e.Trigger(context.Background(), "fuzz::echo", echoReq{Text: "alive"}, nil); err != nil && !errors.Is(err, wire.ErrInvalidPayload) {
			t.Fatalf("worker no longer serves: %v", err)
		}
	})
}

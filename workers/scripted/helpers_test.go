package scripted_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/scripted"
)

// epoch is the fixed clock of the tests.
var epoch = time.UnixMilli(1_700_000_000_000)

func fixedClock() time.Time { return epoch }

// setup starts a server, a provider worker on its own connection and
// returns a client engine on another, as the orchestrator would be.
func setup(t *testing.T, opts ...scripted.Option) (*engine.Engine, *scripted.Worker, *server.Server) {
	t.Helper()
	return setupWith(t, false, opts...)
}

// setupWith is setup with local calls on both engines when local is set,
// as in `iii up`: the stream call runs in the caller's goroutine and the
// provider hands its frames to the reader directly.
func setupWith(t *testing.T, local bool, opts ...scripted.Option) (*engine.Engine, *scripted.Worker, *server.Server) {
	t.Helper()
	ns := enginetest.RunServer(t)
	p, err := scripted.New(append([]scripted.Option{scripted.WithClock(fixedClock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	w := scripted.NewWorker(p)
	if err := w.Start(t.Context(), enginetest.NewEngine(t, ns, engine.WithLocalCalls(local))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	return enginetest.NewEngine(t, ns, engine.WithLocalCalls(local)), w, ns
}

// result is one stream call as the orchestrator sees it.
type result struct {
	events []agent.ModelEvent
	frames []channel.Frame
	end    error // what ended Next: channel.ErrEnd, or a failure
	resp   scripted.StreamResponse
	err    error // the function's own error
}

// stream opens a channel, calls the stream function in a goroutine and
// reads every frame, as the orchestrator does.
func stream(t *testing.T, e *engine.Engine, req scripted.StreamRequest) result {
	t.Helper()
	return streamWith(t, e, req, nil)
}

// streamWith is stream with a hook called after each frame; the hook may
// close the reader.
func streamWith(t *testing.T, e *engine.Engine, req scripted.StreamRequest, each func(r *channel.Reader, ev agent.ModelEvent), opts ...channel.Option) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r, err := channel.Open(ctx, e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	req.Channel = r.ID()
	type reply struct {
		resp scripted.StreamResponse
		err  error
	}
	done := make(chan reply, 1)
	go func() {
		resp, err := engine.Call[scripted.StreamResponse](ctx, e, scripted.StreamFunction, req)
		done <- reply{resp, err}
	}()
	var res result
	for {
		f, err := r.Next(ctx)
		if err != nil {
			res.end = err
			break
		}
		var ev agent.ModelEvent
		if err := f.Decode(&ev); err != nil {
			t.Fatalf("frame %d: %v", f.Seq, err)
		}
		if err := ev.Validate(); err != nil {
			t.Errorf("frame %d: invalid event %+v: %v", f.Seq, ev, err)
		}
		res.events = append(res.events, ev)
		res.frames = append(res.frames, f)
		if each != nil {
			each(r, ev)
		}
	}
	rep := <-done
	res.resp, res.err = rep.resp, rep.err
	return res
}

func types(evs []agent.ModelEvent) []agent.ModelEventType {
	out := make([]agent.ModelEventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// deltas concatenates the deltas of type typ at index.
func deltas(evs []agent.ModelEvent, typ agent.ModelEventType, index int) (string, int) {
	var s string
	n := 0
	for _, ev := range evs {
		if ev.Type == typ && ev.Index == index {
			s += ev.Delta
			n++
		}
	}
	return s, n
}

func last(evs []agent.ModelEvent) agent.ModelEvent {
	if len(evs) == 0 {
		return agent.ModelEvent{}
	}
	return evs[len(evs)-1]
}

func userReq(model, text string) scripted.StreamRequest {
	return scripted.StreamRequest{Model: model, Messages: []agent.Message{agent.UserText(text, 1)}}
}

func isEnd(err error) bool { return errors.Is(err, channel.ErrEnd) }

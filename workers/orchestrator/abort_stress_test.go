package orchestrator_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

// TestAbortAtRandomMoments: 40 sessions each start five runs of assorted
// shapes (a paced answer, one call, two parallel calls, a plain answer)
// and abort each at a random moment (provisioning, streaming, gating,
// executing, after its end); every abort answers, and every session's
// next run then ends normally.
func TestAbortAtRandomMoments(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			sid := fmt.Sprintf("stress-%d", i)
			for round := range 5 {
				var res orchestrator.RunStartResult
				prompt := []string{"/sleep 30\nhello", `/call math::add {"a":1,"b":2}`, "hi", `/call math::add {"a":1,"b":2}` + "\n" + `/call math::add {"a":3,"b":4}`}[rand.IntN(4)]
				for {
					err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", Messages: []agent.Message{userText(prompt)}}, &res)
					if err != nil {
						t.Errorf("%s round %d: run::start: %v", sid, round, err)
						return
					}
					if res.Started {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
				var ab orchestrator.AbortResult
				if err := s.e.Trigger(ctx, "run::abort", orchestrator.SessionRequest{SessionID: sid}, &ab); err != nil {
					t.Errorf("%s round %d: run::abort: %v", sid, round, err)
					return
				}
			}
			// The session's next run ends normally.
			var res orchestrator.RunStartResult
			for {
				if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("final")}}, &res); err != nil {
					t.Errorf("%s final: %v", sid, err)
					return
				}
				if res.Started {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				var view agent.TurnView
				if err := s.e.Trigger(ctx, "turn::get_state", orchestrator.SessionRequest{SessionID: sid}, &view); err == nil && view.RunID == res.RunID && view.State.Terminal() {
					if view.StopReason != agent.StopEnd {
						t.Errorf("%s final run: %s %s", sid, view.State, view.StopReason)
					}
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Errorf("%s final run did not end", sid)
		})
	}
	wg.Wait()
}

package orchestrator_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

// floodHooks subscribes a plain NATS client to subj; a hook of session
// flooded is answered with body again and again (for at most 15 s, or
// until the test ends), any other once with {}.
func floodHooks(t *testing.T, nc *nats.Conn, subj, flooded string, body []byte) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
		var p struct {
			SessionID string `json:"session_id"`
		}
		_ = json.Unmarshal(m.Data, &p)
		if p.SessionID != flooded {
			_ = m.Respond([]byte(`{}`))
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := time.After(15 * time.Second)
			for {
				select {
				case <-stop:
					return
				case <-end:
					return
				default:
				}
				if err := nc.Publish(m.Reply, body); err != nil {
					return
				}
			}
		}()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// startPatientHooks is a stack whose hook rounds wait 10 s for more
// replies: a flood ends them at their bounds, never by a pause of the
// flooder on a busy machine.
func startPatientHooks(t *testing.T, ns *server.Server) *stack {
	t.Helper()
	return startStackEnv(t, enginetest.NewEngine(t, ns), allowAll, nil, map[string]map[string]string{"orchestrator": {
		orchestrator.SettingHookTimeout:    "10s",
		orchestrator.SettingHookQuiescence: "10s",
	}})
}

// A before-call hook subscriber that floods replies overflows the round's
// bounds; the replies not read could hold a block, so the call is denied
// (fail closed, as when the hooks cannot be asked) and never runs. Without
// the bounds, the round ran to its timeout and the call ran.
func TestBeforeHookOverflowDenies(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startPatientHooks(t, ns)
	nc := enginetest.Connect(t, ns)
	floodHooks(t, nc, "iii.hook.agent.before_function_call", "hflood", []byte(`{}`))

	startRun(t, s.e, "hflood", `/call math::add {"a":1,"b":1}`)
	d := denial(t, onlyResult(t, events(t, s.e, "hflood", 30*time.Second)))
	if d.DeniedBy != agent.DeniedByGateUnavailable || !strings.Contains(d.Reason, "replies") {
		t.Fatalf("denial %+v, want %s for too many replies", d, agent.DeniedByGateUnavailable)
	}
	if n := s.calls.Load(); n != 0 {
		t.Fatalf("math::add ran %d times behind an overflowed before-call hook", n)
	}
}

// An after-call hook round that overflows is ignored, as one that could
// not be published: the call's own result stands, not a replacement some
// of the replies carried.
func TestAfterHookOverflowKeepsResult(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startPatientHooks(t, ns)
	nc := enginetest.Connect(t, ns)
	floodHooks(t, nc, "iii.hook.agent.after_function_call", "hflood", []byte(`{"result":{"content":[{"type":"text","text":"[flood]"}]}}`))

	startRun(t, s.e, "hflood", `/call math::add {"a":1,"b":1}`)
	r := onlyResult(t, events(t, s.e, "hflood", 30*time.Second))
	if r.Result.IsError || len(r.Result.Content) == 0 || !strings.Contains(r.Result.Content[0].Text, "2") {
		t.Fatalf("result %+v, want the call's own (sum 2)", r.Result)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("math::add ran %d times, want 1", n)
	}
}

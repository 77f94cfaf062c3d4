package e2e_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
)

// starter is any worker module: started on the node, closed at the end.
type starter interface {
	Start(ctx context.Context, e *engine.Engine) error
}

// node is one engine with the workers a test started on it.
type node struct {
	t *testing.T
	e *engine.Engine
}

func newNode(t *testing.T, ns *server.Server) *node {
	t.Helper()
	return &node{t: t, e: enginetest.NewEngine(t, ns)}
}

// start starts w on the node (provisioned with env when it wants it) and
// closes it when the test ends.
func (n *node) start(w starter, env workers.Env) {
	n.t.Helper()
	ctx := context.Background()
	if p, ok := w.(workers.Provisioner); ok {
		if err := p.Provision(ctx, env); err != nil {
			n.t.Fatal(err)
		}
	}
	if err := w.Start(ctx, n.e); err != nil {
		n.t.Fatal(err)
	}
	if c, ok := w.(workers.Closer); ok {
		n.t.Cleanup(func() { _ = c.Close(context.Background()) })
	}
}

func userText(text string) agent.Message {
	return agent.Message{Role: agent.RoleUser, Content: []agent.Content{{Type: agent.ContentText, Text: text}}}
}

// runToEnd starts a run and returns its events up to agent_end.
func (n *node) runToEnd(rs agent.RunStart, timeout time.Duration) []agent.Event {
	n.t.Helper()
	var res struct {
		Started bool   `json:"started"`
		Reason  string `json:"reason"`
	}
	if err := n.e.Trigger(context.Background(), "run::start", rs, &res); err != nil || !res.Started {
		n.t.Fatalf("run::start %s = %+v, %v", rs.SessionID, res, err)
	}
	return n.events(rs.SessionID, timeout)
}

// events reads the session's events from the start of its stream up to
// the first agent_end.
func (n *node) events(sid string, timeout time.Duration) []agent.Event {
	n.t.Helper()
	return n.eventsUntil(sid, 1, timeout)
}

// eventsUntil reads the session's events from the start of its stream up
// to the n-th agent_end and returns those of the last run.
func (n *node) eventsUntil(sid string, ends int, timeout time.Duration) []agent.Event {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	subj, err := subjects.EventSubject(sid)
	if err != nil {
		n.t.Fatal(err)
	}
	cons, err := n.e.JetStream().OrderedConsumer(ctx, subjects.EventStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		n.t.Fatal(err)
	}
	var run []agent.Event
	for seen := 0; ; {
		dl, _ := ctx.Deadline()
		m, err := cons.Next(jetstream.FetchMaxWait(time.Until(dl)))
		if err != nil {
			n.t.Fatalf("events of %s after %d agent_end: %v", sid, seen, err)
		}
		var ev agent.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			n.t.Fatal(err)
		}
		run = append(run, ev)
		if ev.Type == agent.EventAgentEnd {
			if seen++; seen == ends {
				return run
			}
			run = nil
		}
	}
}

package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/subjects"
)

// A run::start on an unclustered node hands the record it wrote to its
// own grain host (session.Host.Written), which starts the run before the
// step message is stored. The step then names that host in
// headerStepHost. When replicas share the step consumer, another
// orchestrator may consume it: that one hands the step over to the named
// host on subjects.StepHostSubject, so the grain running the run holds
// the step (acks it, marks it in progress) through the step's reply
// subject, as a clustered member does. A host that does not answer (dead,
// draining, restarted under a new id) leaves the step to the consumer's
// own host, which takes the session over from its record.

// headerStepHost names, on a step message, the grain host that started
// the run already.
const headerStepHost = "Iii-Step-Host"

// handOverTimeout bounds asking another host to take a step.
const handOverTimeout = 2 * time.Second

// hostWake is the hand-over request.
type hostWake struct {
	SessionID string `json:"session_id"`
	Step      uint64 `json:"step"`
	// Reply is the step message's reply subject ($JS.ACK...).
	Reply string `json:"reply"`
}

// Answers to a hand-over.
var (
	handOverTaken   = []byte("taken")
	handOverRefused = []byte("refused")
)

// HostID names this orchestrator's grain host on
// subjects.StepHostSubject (tests, logs).
func (o *Orchestrator) HostID() string { return o.hostID }

// serveHandOver subscribes this orchestrator's host subject.
func (o *Orchestrator) serveHandOver() error {
	subj, err := subjects.StepHostSubject(o.hostID)
	if err != nil {
		return err
	}
	sub, err := o.e.Conn().Subscribe(subj, o.onHandOver)
	if err != nil {
		return err
	}
	o.handOverSub = sub
	return nil
}

// onHandOver gives a step another orchestrator consumed to the local
// grain, acked through the step's reply subject.
func (o *Orchestrator) onHandOver(m *nats.Msg) {
	var hw hostWake
	err := json.Unmarshal(m.Data, &hw)
	if err == nil {
		err = agent.ValidateSessionID(hw.SessionID)
	}
	if err == nil && !strings.HasPrefix(hw.Reply, "$JS.ACK.") {
		err = fmt.Errorf("reply %q is not a JetStream ack subject", hw.Reply)
	}
	if err != nil {
		o.logger.Warn("bad step hand-over refused", "subject", m.Subject, "error", err)
		_ = m.Respond(handOverRefused)
		return
	}
	nc := o.e.Conn()
	if err := o.Host().Wake(hw.SessionID, session.ReplyWake(hw.Step, hw.Reply, nc.Publish)); err != nil {
		_ = m.Respond(handOverRefused)
		return
	}
	_ = m.Respond(handOverTaken)
}

// handOver asks host to take step st (reply is the step's reply
// subject); false when it did not (the caller serves the step itself).
func (o *Orchestrator) handOver(host string, st Step, reply string) bool {
	subj, err := subjects.StepHostSubject(host)
	if err != nil {
		return false
	}
	data, _ := json.Marshal(hostWake{SessionID: st.SessionID, Step: st.Step, Reply: reply})
	ctx, cancel := context.WithTimeout(context.Background(), handOverTimeout)
	defer cancel()
	ans, err := o.e.Conn().RequestWithContext(ctx, subj, data)
	return err == nil && string(ans.Data) == string(handOverTaken)
}

// firstDelivery reports whether m is delivered for the first time.
func firstDelivery(m jetstream.Msg) bool {
	md, err := m.Metadata()
	return err == nil && md.NumDelivered == 1
}

package state

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
)

const (
	// setupAttempt bounds one attempt to find or create a trigger's
	// consumer; a request sent while the stream elects a leader is never
	// answered, and only the next attempt reaches the new one.
	setupAttempt = 5 * time.Second
	// defaultCheckEvery is how often a running trigger asks for its
	// consumer's state: to learn its ack floor, and to notice a deletion
	// the consume did not report.
	defaultCheckEvery = engine.ConsumerCheckEvery
)

// ensureConsumer creates the trigger's consumer from cfg or binds the
// existing one, updating what may change (ack wait, max deliver, ...).
// An existing consumer keeps its deliver policy and start: JetStream cannot
// change them, and its position is what matters.
func (s *Subscription) ensureConsumer(ctx context.Context, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	for range 2 {
		cons, err := s.store.stream.Consumer(ctx, cfg.Durable)
		if err == nil {
			cur := cons.CachedInfo().Config
			cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = cur.DeliverPolicy, cur.OptStartSeq, cur.OptStartTime
			return s.store.stream.UpdateConsumer(ctx, cfg)
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, err
		}
		cons, err = s.store.stream.CreateConsumer(ctx, cfg)
		if !errors.Is(err, jetstream.ErrConsumerExists) {
			return cons, err
		}
		// Another replica created it meanwhile: bind that one.
	}
	return nil, jetstream.ErrConsumerExists
}

// supervise watches the consume and the consumer until quit closes: when
// the consumer is gone, or the consume ended by itself, it re-creates or
// re-binds the consumer and consumes again, with backoff.
func (s *Subscription) supervise() {
	defer close(s.superDone)
	// life ends with quit; it bounds every request made here.
	life, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		select {
		case <-s.quit:
			stop()
		case <-life.Done():
		}
	}()
	log := s.e.Logger()
	tick := time.NewTicker(s.opts.checkEvery)
	defer tick.Stop()
	pace := engine.LostConsumerPace()
	for {
		closed := s.cc.Closed()
		select {
		case <-s.quit:
			return
		case <-closed:
		case <-s.check:
		case <-tick.C:
		}
		gone := s.probe(life)
		ended := false
		select {
		case <-closed:
			ended = true
		default:
		}
		if !gone && !ended {
			continue
		}
		if nc := s.e.Conn(); nc.IsClosed() || nc.IsDraining() {
			// The engine is closing: nothing to consume with.
			return
		}
		log.Warn("state trigger lost its consumer; re-creating it", "consumer", s.name, "function_id", s.trig.FunctionID,
			"scope", s.trig.Scope, "key_pattern", s.trig.KeyPattern, "consumer_gone", gone, "consume_ended", ended)
		s.cc.Stop()
		delay := pace.Lost()
		for {
			select {
			case <-s.quit:
				return
			case <-time.After(delay):
			}
			err := s.restore(life)
			if err == nil {
				break
			}
			select {
			case <-s.quit:
				return
			default:
			}
			delay = pace.Failed()
			log.Warn("state trigger could not re-create its consumer; will retry", "consumer", s.name,
				"function_id", s.trig.FunctionID, "retry_in", delay, "error", err)
		}
		pace.Recovered()
		log.Info("state trigger consumer re-created", "consumer", s.name, "function_id", s.trig.FunctionID)
	}
}

// probe asks for the consumer's state, raising the ledger's floor to its
// ack floor. It reports whether the consumer (or its stream) is gone.
func (s *Subscription) probe(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, setupAttempt)
	defer cancel()
	info, err := s.cons.Info(ctx)
	if err != nil {
		return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
	}
	s.led.raiseFloor(info.AckFloor.Stream)
	return false
}

// restore re-creates the consumer, or binds the one another replica
// re-created, and consumes it. The new consumer starts after the ack
// floor last seen, or at the start of the stream when the stream was
// created again (its sequences start over, so the ledger does too).
func (s *Subscription) restore(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*setupAttempt)
	defer cancel()
	var cons jetstream.Consumer
	led := s.led
	created := s.streamCreated
	err := engine.Retry(ctx, setupAttempt, func(ctx context.Context) error {
		info, err := s.store.stream.Info(ctx)
		if err != nil {
			return err
		}
		cfg := s.cfg
		if info.Created.Equal(s.streamCreated) {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, led.floorSeq()+1
		} else {
			led, created = newLedger(0), info.Created
			cfg.DeliverPolicy = jetstream.DeliverAllPolicy
		}
		cons, err = s.ensureConsumer(ctx, cfg)
		return err
	}, engine.TransientJS)
	if err != nil {
		return err
	}
	cc, err := s.consume(cons, led)
	if err != nil {
		return err
	}
	s.cons, s.cc, s.led, s.streamCreated = cons, cc, led, created
	return nil
}

// ledgerMax bounds the finished events a ledger remembers above the floor.
const ledgerMax = 1 << 16

// ledger remembers the events of one consumer's stream whose call finished
// in this process (succeeded, or was given up), above the consumer's ack
// floor, and the calls running: so that an event delivered again (its ack
// lost, or the consumer re-created from the floor) is not called twice.
type ledger struct {
	mu       sync.Mutex
	floor    uint64
	finished map[uint64]struct{}
	running  map[uint64]chan struct{}
}

func newLedger(floor uint64) *ledger {
	return &ledger{floor: floor, finished: map[uint64]struct{}{}, running: map[uint64]chan struct{}{}}
}

// claim reports whether the event at seq finished here; if not, and its
// call runs here, it returns a channel closed when that call ends (claim
// again then); otherwise seq is claimed, and release must follow.
func (l *ledger) claim(seq uint64) (finished bool, running <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.finished[seq]; ok {
		return true, nil
	}
	if ch, ok := l.running[seq]; ok {
		return false, ch
	}
	l.running[seq] = make(chan struct{})
	return false, nil
}

// release ends the claim of seq; finished records that its call succeeded
// or was given up.
func (l *ledger) release(seq uint64, finished bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch, ok := l.running[seq]; ok {
		close(ch)
		delete(l.running, seq)
	}
	if !finished || seq <= l.floor {
		return
	}
	l.finished[seq] = struct{}{}
	if len(l.finished) > ledgerMax {
		// Forget the oldest quarter: they may run again after a consumer
		// loss, which at-least-once delivery allows.
		seqs := make([]uint64, 0, len(l.finished))
		for k := range l.finished {
			seqs = append(seqs, k)
		}
		slices.Sort(seqs)
		for _, k := range seqs[:len(seqs)/4] {
			delete(l.finished, k)
		}
	}
}

// raiseFloor records the consumer's ack floor f: the events at or below it
// are acked and never delivered again, so they need not be remembered.
func (l *ledger) raiseFloor(f uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f <= l.floor {
		return
	}
	l.floor = f
	for k := range l.finished {
		if k <= f {
			delete(l.finished, k)
		}
	}
}

func (l *ledger) floorSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.floor
}

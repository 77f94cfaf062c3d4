package engine

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ScanHeaders reads the messages of stream s on subject stored since
// since, headers only and oldest first, and calls fn with each until fn
// returns false or no message is left. It returns how many fn saw. The read
// uses one server consumer (an ordered consumer's every Fetch would make a
// new one), deleted at the end rather than left to its inactive threshold:
// a node replaying many sessions at once after an outage must not fill the
// stream's consumer limit. A stream with nothing on subject since since
// answers 0 at once.
func ScanHeaders(ctx context.Context, s jetstream.Stream, subject string, since time.Time, fn func(jetstream.Msg, *jetstream.MsgMetadata) bool) (int, error) {
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{subject},
		DeliverPolicy:     jetstream.DeliverByStartTimePolicy,
		OptStartTime:      &since,
		HeadersOnly:       true,
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return 0, err
	}
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = s.DeleteConsumer(dctx, info.Name)
			cancel()
		}
	}()
	if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
		return 0, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	n := 0
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return n, err
		}
		md, err := m.Metadata()
		if err != nil {
			return n, err
		}
		n++
		if !fn(m, md) || md.NumPending == 0 {
			return n, nil
		}
	}
}

package scripted

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// probeInterval is how often a waiting stream asks whether its reader is
// still there (a channel writer probes as often while it waits for credit).
const probeInterval = 500 * time.Millisecond

// statusNoResponders is the server's answer to a ping nobody reads.
const statusNoResponders = "503"

// watch notices, while a stream waits (a delay, a pace between deltas),
// that its reader is gone: the reader's cancel on the channel's ack
// subject, or a cancel or the server's no-responders status in answer to
// its pings. A channel.Writer notices both too, but only when it writes,
// and a scripted stream may wait up to MaxSleep before its next frame.
//
// The pings are answered on an inbox of the watch's own: the server sends
// a no-responders status to one subscription of the reply subject only, so
// on the ack subject the writer's subscription could take it.
type watch struct {
	nc    *nats.Conn
	ping  string
	inbox string
	subs  []*nats.Subscription
	gone  chan struct{}
	once  sync.Once
}

// newWatch subscribes to the ack subject of channel id and to its own
// inbox, and asks the reader once whether it is still there (a cancel sent
// before the subscription is answered again).
func newWatch(nc *nats.Conn, id string) (*watch, error) {
	subj, err := subjects.ChannelSubject(id)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	w := &watch{
		nc:    nc,
		ping:  subj + subjects.ChannelPingSuffix,
		inbox: nc.NewInbox(),
		gone:  make(chan struct{}),
	}
	for _, s := range []string{subj + subjects.ChannelAckSuffix, w.inbox} {
		sub, err := nc.Subscribe(s, w.onControl)
		if err != nil {
			w.stop()
			return nil, wire.FromNATS(err)
		}
		w.subs = append(w.subs, sub)
	}
	if err := w.probe(); err != nil {
		w.stop()
		return nil, err
	}
	return w, nil
}

func (w *watch) onControl(m *nats.Msg) {
	cancel := m.Header.Get(channel.HeaderKind) == channel.KindCancel.String()
	noReader := len(m.Data) == 0 && m.Header.Get("Status") == statusNoResponders
	if cancel || noReader {
		w.once.Do(func() { close(w.gone) })
	}
}

// probe asks the reader for its state; the answer (credit, cancel or
// no-responders) comes to the inbox.
func (w *watch) probe() error {
	err := w.nc.PublishMsg(&nats.Msg{
		Subject: w.ping,
		Reply:   w.inbox,
		Header:  nats.Header{channel.HeaderKind: []string{channel.KindPing.String()}},
	})
	if err != nil {
		return wire.FromNATS(err)
	}
	return nil
}

// sleep waits d; it returns channel.ErrReaderGone as soon as the reader is
// gone and ctx's error when ctx ends first.
func (w *watch) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	var tick <-chan time.Time
	if d > probeInterval {
		tk := time.NewTicker(probeInterval)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		select {
		case <-w.gone:
			return channel.ErrReaderGone
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case <-tick:
			if err := w.probe(); err != nil {
				return err
			}
		}
	}
}

func (w *watch) stop() {
	for _, sub := range w.subs {
		_ = sub.Unsubscribe()
	}
}

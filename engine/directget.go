package engine

import (
	"context"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Headers of a batch direct get's end-of-batch status.
const (
	headerNumPending = "Nats-Num-Pending"
	headerUpToSeq    = "Nats-UpTo-Sequence"
)

// BatchEnd is what the end-of-batch status of a batch direct get says:
// how many matching messages the server left out (Pending: the batch hit
// its size or count bound) and the stream sequence it read at (UpToSeq).
// Both are zero when no message matched.
type BatchEnd struct {
	Pending uint64
	UpToSeq uint64
}

// DirectGetBatch runs one batch direct get (nats-server 2.11 or later) on
// stream: body is the request ({"seq", "next_by_subj", "batch",
// "max_bytes"} or {"multi_last", "up_to_seq", …}), the answer its messages
// in the server's order and its end status. No match is no messages and a
// zero BatchEnd. The reply is collected by a callback subscription (a
// synchronous one would allocate its 64k-slot channel per request) and
// returned once complete. Transport errors and ctx's end are returned as
// they are, for the caller to classify; a status other than the end of the
// batch is unavailable.
func DirectGetBatch(ctx context.Context, nc *nats.Conn, stream string, body []byte) ([]*nats.Msg, BatchEnd, error) {
	var (
		mu   sync.Mutex
		msgs []*nats.Msg
		end  *nats.Msg
		done = make(chan struct{})
	)
	sub, err := nc.Subscribe(nc.NewInbox(), func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if end != nil {
			return
		}
		if !batchStatus(m) {
			msgs = append(msgs, m)
			return
		}
		end = m
		close(done)
	})
	if err != nil {
		return nil, BatchEnd{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, sub.Subject, body); err != nil {
		return nil, BatchEnd{}, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, BatchEnd{}, ctx.Err()
	}
	mu.Lock()
	got, status := msgs, end
	mu.Unlock()
	var be BatchEnd
	switch code := status.Header.Get("Status"); code {
	case "204": // end of batch
		be.Pending, _ = strconv.ParseUint(status.Header.Get(headerNumPending), 10, 64)
		be.UpToSeq, _ = strconv.ParseUint(status.Header.Get(headerUpToSeq), 10, 64)
	case "404": // nothing matched
	default:
		return nil, BatchEnd{}, wire.Errorf(wire.CodeUnavailable, "batch direct get on %s (nats-server 2.11 or later): status %s %s",
			stream, code, status.Header.Get("Description"))
	}
	return got, be, nil
}

// batchStatus reports whether m is the server's status that ends a batch
// direct get, not one of its messages. A stored message may carry a
// header of its own named "Status" (any client can publish one); only a
// stored message carries its stream sequence.
func batchStatus(m *nats.Msg) bool {
	return m.Header.Get("Status") != "" && m.Header.Get(jetstream.SequenceHeader) == ""
}

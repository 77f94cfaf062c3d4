package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/wire"
)

// LeaderGet names the message [Engine.LeaderGet] reads: the one stored at
// Seq, or the last one on subject LastBySubject.
type LeaderGet struct {
	Seq           uint64 `json:"seq,omitempty"`
	LastBySubject string `json:"last_by_subj,omitempty"`
}

// LeaderGet reads one message of stream from the stream's leader (the
// JetStream API, not a direct get). A direct get — what nats.go's KV Get
// and Stream.GetMsg use when the stream allows it — may be answered by a
// replica that has not applied the newest writes yet; a compare-and-set
// based on such a read fails. A message that is not there is
// [jetstream.ErrMsgNotFound]. A request nobody answers within 5 s (the
// stream is electing a leader) or that the server answers unavailable is
// sent again, until ctx ends: a read is safe to repeat, and a caller
// with a long deadline would otherwise wait it out whole.
func (e *Engine) LeaderGet(ctx context.Context, stream string, which LeaderGet) (*jetstream.RawStreamMsg, error) {
	body, err := json.Marshal(which)
	if err != nil {
		return nil, err
	}
	// While a stream has no leader (an election after a server died), a
	// request is not answered at all: only the next one reaches the new
	// leader. Attempts are RetryRead's.
	var m *jetstream.RawStreamMsg
	err = Retry(ctx, readAttempt, func(ctx context.Context) error {
		m, err = e.leaderGetOnce(ctx, stream, body)
		return err
	}, func(err error) bool { return Unanswered(err) || errors.Is(err, errStreamUnavailable) })
	if err != nil {
		return nil, err
	}
	return m, nil
}

// errStreamUnavailable marks a leader read the server answered with 503
// (no leader yet): it is sent again.
var errStreamUnavailable = errors.New("stream unavailable")

func (e *Engine) leaderGetOnce(ctx context.Context, stream string, body []byte) (*jetstream.RawStreamMsg, error) {
	reply, err := e.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "read %s from its leader (is JetStream enabled?)", stream)
	}
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "read %s from its leader", stream)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrorCode   int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, wire.Errorf(wire.CodeUnavailable, "read %s from its leader: the reply does not decode", stream)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == int(jetstream.JSErrCodeMessageNotFound):
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil && resp.Error.ErrorCode == int(jetstream.JSErrCodeStreamNotFound):
		return nil, jetstream.ErrStreamNotFound
	case resp.Error != nil && resp.Error.Code == 503:
		return nil, wire.Wrap(wire.CodeUnavailable, fmt.Errorf("%w: %s", errStreamUnavailable, resp.Error.Description), "read %s from its leader", stream)
	case resp.Error != nil || resp.Message == nil:
		return nil, wire.Errorf(wire.CodeUnavailable, "read %s from its leader: %s", stream, reply.Data)
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("read %s from its leader: headers: %w", stream, err)
		}
	}
	return m, nil
}

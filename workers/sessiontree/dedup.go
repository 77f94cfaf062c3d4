package sessiontree

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// entryMsgID is the message id of entry i of a chain appended to session
// sid with dedupID: what the entry stream's duplicate window keys on.
func entryMsgID(sid, dedupID string, i int) string {
	return chainMsgIDPrefix(sid, dedupID) + strconv.Itoa(i)
}

// chainMsgIDPrefix is what the message ids of a chain's entries start with.
func chainMsgIDPrefix(sid, dedupID string) string { return sid + "." + dedupID + "." }

// storedChain answers the entries of a chain of n appended to session sid
// with dedupID that are stored since sinceMs (Unix ms), found by their
// message ids among the session's entries stored since then: entry i is
// published only once entry i-1 is stored, so a first attempt stored a
// prefix of the chain, which is what storedChain answers (nil when
// nothing). It reads every entry of the session stored since sinceMs, in
// batch direct gets of at most [maxBatch], and stops once it has found
// all n. In a cluster any current replica answers a direct get, and one
// a moment behind the leader may miss an entry stored just before; a
// retry that soon is inside the stream's duplicate window, where the
// leader drops the repeated publish anyway.
func (s *Store) storedChain(ctx context.Context, sid, dedupID string, sinceMs int64, n int) ([]node, error) {
	stream, err := s.entriesName(ctx, sid)
	if err != nil {
		return nil, err
	}
	subj := EntrySubjectPrefix + sid
	prefix := chainMsgIDPrefix(sid, dedupID)
	found := make(map[int]node, n)
	since := time.UnixMilli(sinceMs)
	req := batchRequest{StartTime: &since, NextFor: subj, Batch: maxBatch, MaxBytes: maxBatchBytes}
	for len(found) < n {
		var (
			last uint64
			got  int
		)
		more, err := s.rawBatch(ctx, stream, req, func(msg *nats.Msg) (bool, error) {
			nd, err := directNode(msg)
			if errors.Is(err, errNotEntry) {
				// Another client's message on the subject: passed over.
				got++
				last = nd.seq
				return true, nil
			}
			if err != nil {
				return false, err
			}
			got++
			last = nd.seq
			rest, ok := strings.CutPrefix(msg.Header.Get(jetstream.MsgIDHeader), prefix)
			if !ok {
				return true, nil
			}
			if i, err := strconv.Atoi(rest); err == nil && i >= 0 && i < n {
				if _, dup := found[i]; !dup {
					found[i] = nd
				}
			}
			return len(found) < n, nil
		})
		if err != nil {
			return nil, err
		}
		if !more || got == 0 {
			break
		}
		req = batchRequest{Seq: last + 1, NextFor: subj, Batch: maxBatch, MaxBytes: maxBatchBytes}
	}
	var chain []node
	for i := range n {
		nd, ok := found[i]
		if !ok {
			break
		}
		chain = append(chain, nd)
	}
	return chain, nil
}

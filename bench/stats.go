package bench

import (
	"context"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of sorted,
// or 0 when it is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(float64(len(sorted))*p/100)) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// splitFirstTurns copies the latencies of each session's first turn and
// of the others out of lat (session i's turn j at i*turns+j), leaving out
// the turns that did not complete (0).
func splitFirstTurns(lat []time.Duration, sessions, turns int) (first, later []time.Duration) {
	for i := range sessions {
		for j := range turns {
			k := i*turns + j
			if k >= len(lat) || lat[k] <= 0 {
				continue
			}
			if j == 0 {
				first = append(first, lat[k])
			} else {
				later = append(later, lat[k])
			}
		}
	}
	return first, later
}

// latencies summarises ds (it sorts them).
type latencies struct{ p50, p90, p99, max, mean time.Duration }

func summarize(ds []time.Duration) latencies {
	if len(ds) == 0 {
		return latencies{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return latencies{
		p50:  percentile(ds, 50),
		p90:  percentile(ds, 90),
		p99:  percentile(ds, 99),
		max:  ds[len(ds)-1],
		mean: sum / time.Duration(len(ds)),
	}
}

// counters are the servers' cumulative counters the bench diffs.
type counters struct {
	lastSeq map[string]uint64 // per stream
	acks    uint64            // ack floors of the consumers that ack, summed
	pending int               // messages delivered and not yet acked
	jsAPI   uint64
	msgsIn  int64
}

// snapshot reads the counters of srvs, the nodes of one cluster: a
// stream's last sequence and a consumer's ack floor and pending count are
// the highest any node reports (each node reports the streams it holds a
// replica of), JetStream API calls and messages received are summed over
// the nodes (a message routed from node to node, replication included,
// counts on every node it enters).
func snapshot(srvs []*server.Server) (counters, error) {
	c := counters{lastSeq: map[string]uint64{}}
	type cons struct{ stream, name string }
	acks, pending := map[cons]uint64{}, map[cons]int{}
	for _, s := range srvs {
		jsz, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true, Config: true})
		if err != nil {
			return c, err
		}
		c.jsAPI += jsz.API.Total
		for _, acc := range jsz.AccountDetails {
			for _, sd := range acc.Streams {
				c.lastSeq[sd.Name] = max(c.lastSeq[sd.Name], sd.State.LastSeq)
				for _, ci := range sd.Consumer {
					// Ordered consumers (transcript reads) ack nothing.
					if ci != nil && ci.Config != nil && ci.Config.AckPolicy != server.AckNone {
						k := cons{sd.Name, ci.Name}
						acks[k] = max(acks[k], ci.AckFloor.Consumer)
						pending[k] = max(pending[k], ci.NumAckPending)
					}
				}
			}
		}
		vz, err := s.Varz(nil)
		if err != nil {
			return c, err
		}
		c.msgsIn += vz.InMsgs
	}
	for k, a := range acks {
		c.acks += a
		c.pending += pending[k]
	}
	return c, nil
}

// perTurn divides the counters' growth from before to after by turns.
func perTurn(before, after counters, turns int, events int64) Cost {
	n := float64(max(turns, 1))
	c := Cost{StreamWrites: map[string]float64{}}
	for name, seq := range after.lastSeq {
		d := seq - min(before.lastSeq[name], seq)
		if d == 0 {
			continue
		}
		c.StreamWrites[name] = float64(d) / n
		c.Writes += float64(d) / n
	}
	c.Acks = float64(after.acks-min(before.acks, after.acks)) / n
	c.JSAPI = float64(after.jsAPI-min(before.jsAPI, after.jsAPI)) / n
	c.MsgsIn = float64(after.msgsIn-min(before.msgsIn, after.msgsIn)) / n
	c.Events = float64(events) / n
	return c
}

// settledSnapshot waits (up to wait) until no consumer has messages
// pending an ack — the grains have checkpointed their last runs and acked
// the steps that woke them — and no stream has grown for settleQuiet,
// and returns the counters then. Pending acks alone do not say a run's
// last effects are stored: the step that run::start publishes after
// handing the run to its grain is acked as a duplicate on arrival, and a
// run's last transcript append may land after the agent_end a client
// waits for.
func settledSnapshot(ctx context.Context, srvs []*server.Server, wait time.Duration) (counters, error) {
	deadline := time.Now().Add(wait)
	var prev counters
	for {
		c, err := snapshot(srvs)
		if err != nil || time.Now().After(deadline) {
			return c, err
		}
		if c.pending == 0 && prev.lastSeq != nil && maps.Equal(c.lastSeq, prev.lastSeq) {
			return c, nil
		}
		prev = c
		select {
		case <-time.After(settleQuiet):
		case <-ctx.Done():
			return c, ctx.Err()
		}
	}
}

// settleQuiet is how long the streams must not grow for settledSnapshot.
const settleQuiet = 25 * time.Millisecond

package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/subjects"
)

// ChokepointResult compares one function call made bare (a trigger) with
// the same call through the chokepoint (human-only list, policy, approval
// settings, before-hooks, the call, after-hooks), measured interleaved in
// one run on one embedded node: with no hook subscriber, and with one plain
// NATS subscriber answering {} on both hook topics.
type ChokepointResult struct {
	Calls  int       `json:"calls"`
	Bare   LatencyMs `json:"bare"`
	Gated  LatencyMs `json:"gated"`
	Hooked LatencyMs `json:"hooked"`
	// GatedOverheadP99Ms is Gated.P99 - Bare.P99 (target < 1 ms).
	GatedOverheadP99Ms float64 `json:"gated_overhead_p99_ms"`
	// GatedRatioP50 is Gated.P50 / Bare.P50; HookedRatioP50 likewise.
	GatedRatioP50  float64 `json:"gated_ratio_p50"`
	HookedRatioP50 float64 `json:"hooked_ratio_p50"`
}

// LatencyMs is a latency summary in milliseconds.
type LatencyMs struct {
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
}

func latencyMs(ds []time.Duration) LatencyMs {
	l := summarize(ds)
	return LatencyMs{P50: ms(l.p50), P99: ms(l.p99), Mean: ms(l.mean)}
}

// Chokepoint measures calls calls of each kind (after a warm-up) on a
// fresh node whose data lives in dir ("" for a temporary directory).
func Chokepoint(ctx context.Context, calls int, dir string) (ChokepointResult, error) {
	if calls < 1 || calls > 1_000_000 {
		return ChokepointResult{}, fmt.Errorf("%w: calls %d must be 1..1000000", ErrInvalidConfig, calls)
	}
	cfg := Config{Dir: dir}.withDefaults()
	s, err := startStack(ctx, cfg)
	if err != nil {
		return ChokepointResult{}, fmt.Errorf("bench: start the stack: %w", err)
	}
	defer s.close(context.Background())
	const sid = "chokepoint"
	args := map[string]any{}
	bare := func() error { return s.e.Trigger(ctx, NoopFunction, args, nil) }
	gated := func() error {
		if r := s.orch.AgentTrigger(ctx, sid, NoopFunction, args); r.IsError {
			return fmt.Errorf("%w: the gated call failed: %+v", ErrTurnFailed, r)
		}
		return nil
	}
	timed := func(f func() error, into *[]time.Duration) error {
		start := time.Now()
		if err := f(); err != nil {
			return err
		}
		*into = append(*into, time.Since(start))
		return nil
	}
	for range 200 { // warm-up: catalog, subjects, policy paths
		if err := bare(); err != nil {
			return ChokepointResult{}, err
		}
		if err := gated(); err != nil {
			return ChokepointResult{}, err
		}
	}
	res := ChokepointResult{Calls: calls}
	var b, g, h []time.Duration
	for range calls {
		if err := timed(bare, &b); err != nil {
			return res, err
		}
		if err := timed(gated, &g); err != nil {
			return res, err
		}
	}
	// One hook subscriber, a plain NATS client on its own connection.
	nc, err := s.node.Connect(nats.Name("iii-bench-hook"))
	if err != nil {
		return res, err
	}
	defer nc.Close()
	for _, topic := range []string{"agent::before_function_call", "agent::after_function_call"} {
		subj, err := subjects.HookSubject(topic)
		if err != nil {
			return res, err
		}
		if _, err := nc.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond([]byte("{}")) }); err != nil {
			return res, err
		}
	}
	if err := nc.Flush(); err != nil {
		return res, err
	}
	for range max(calls/20, 20) { // each hooked call waits out the quiescence
		if err := timed(gated, &h); err != nil {
			return res, err
		}
	}
	res.Bare, res.Gated, res.Hooked = latencyMs(b), latencyMs(g), latencyMs(h)
	res.GatedOverheadP99Ms = res.Gated.P99 - res.Bare.P99
	if res.Bare.P50 > 0 {
		res.GatedRatioP50 = res.Gated.P50 / res.Bare.P50
		res.HookedRatioP50 = res.Hooked.P50 / res.Bare.P50
	}
	return res, nil
}

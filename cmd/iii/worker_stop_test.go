package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/std"
)

// `iii worker run orchestrator` gives its stop the orchestrator's
// drain_timeout plus stopGrace, as `iii up` does: it stopped within a
// fixed 15 s, so a drain_timeout above that was cut short and the model
// call in flight was abandoned, for another orchestrator to make again.
func TestWorkerRunStopWaitsForDrain(t *testing.T) {
	t.Parallel()
	mods := slices.DeleteFunc(slices.Clone(std.Default), func(m string) bool { return m == "orchestrator" })
	a := startTestAppWith(t, upConfig{modules: mods})
	url := a.node.ClientURL()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	cmd := newRootCmd()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"worker", "run", "orchestrator", "--nats", url, "--home", t.TempDir(), "--log-level", "error",
		"--set", "orchestrator.drain_timeout=40s"})
	go func() { done <- cmd.ExecuteContext(ctx) }()
	enginetest.Eventually(t, 20*time.Second, func() error {
		res, err := runIII(t, "workers", "--nats", url)
		if err != nil || !strings.Contains(res, "orchestrator") {
			return fmt.Errorf("workers: %v\n%s", err, res)
		}
		return nil
	})
	// A model call of 20 s: longer than the fixed 15 s, well within the
	// drain timeout.
	runSlowTurn(t, url, "wr_drain", 20000)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker run stopped with %v, want a clean stop after the drain", err)
		}
	case <-time.After(40*time.Second + stopGrace):
		t.Fatal("worker run did not stop")
	}
	// The drain let the model call finish and be recorded: the run
	// ended on this orchestrator, where it was cut mid-call and left for
	// another one to call the model again.
	if state := turnState(t, a, "wr_drain"); state != "stopped" {
		t.Fatalf("the turn record is in state %q after worker run stopped, want stopped", state)
	}
	// And its events are out: a client following the session sees the
	// run end without waiting for another orchestrator.
	if !hasEvent(t, a, "wr_drain", "agent_end") {
		t.Fatal("no agent_end published for the turn the drain finished")
	}
}

// hasEvent reports whether session sid's event stream holds an event of
// type typ.
func hasEvent(t *testing.T, a *app, sid, typ string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := a.e.JetStream().Stream(ctx, subjects.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil || m.Subject != subjects.EventSubjectPrefix+sid {
			continue
		}
		var ev struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Data, &ev) == nil && ev.Type == typ {
			return true
		}
	}
	return false
}

// turnState is the state of session sid's turn record (iii-turn-state).
func turnState(t *testing.T, a *app, sid string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := a.e.JetStream().KeyValue(ctx, subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatalf("turn record of %s: %v", sid, err)
	}
	return rec.State
}

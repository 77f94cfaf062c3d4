package cron_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/cron"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

func TestScheduleOnOneNodeRunsOnAnother(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	ctx := context.Background()

	// Node A serves the cron functions and runs a scheduler; node B only
	// runs a scheduler; a third engine is the caller and the target.
	a := enginetest.NewEngine(t, ns)
	sa := start(t, a)
	if _, err := cron.Serve(ctx, a, sa); err != nil {
		t.Fatal(err)
	}
	b := enginetest.NewEngine(t, ns)
	sb := start(t, b)
	caller := enginetest.NewEngine(t, ns)
	var rec tickRecorder
	rec.register(t, caller, "test::tick")

	resp, err := engine.Call[cron.ScheduleResponse](ctx, caller, cron.FnSchedule,
		cron.Job{ID: "j1", Expression: "@every 100ms", FunctionID: "test::tick", Data: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if next, err := time.Parse(time.RFC3339Nano, resp.Next); resp.ID != "j1" || err != nil || next.UnixMilli()%100 != 0 {
		t.Fatalf("schedule = %+v (%v)", resp, err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if jobs := sb.Jobs(); len(jobs) != 1 || jobs[0].ID != "j1" || jobs[0].Data != "hello" {
			return fmt.Errorf("node B runs %+v", jobs)
		}
		if _, ok := sb.Next("j1"); !ok {
			return errors.New("node B has no next tick")
		}
		if c, _ := rec.snapshot(); len(c) < 3 {
			return fmt.Errorf("%d ticks", len(c))
		}
		return nil
	})

	list, err := engine.Call[cron.ListResponse](ctx, caller, cron.FnList, nil)
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].ID != "j1" || list.Jobs[0].Expression != "@every 100ms" || list.Jobs[0].Next == "" {
		t.Fatalf("list = %+v, %v", list, err)
	}

	// The same list over plain JSON, as `nats req iii.fn.cron.list '{}'`.
	reply, err := caller.Conn().Request("iii.fn.cron.list", []byte(`{}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string][]map[string]any
	if err := json.Unmarshal(reply.Data, &raw); err != nil || raw["jobs"][0]["function_id"] != "test::tick" || raw["jobs"][0]["data"] != "hello" {
		t.Fatalf("json list = %s (%v)", reply.Data, err)
	}

	un, err := engine.Call[cron.UnscheduleResponse](ctx, caller, cron.FnUnschedule, cron.UnscheduleRequest{ID: "j1"})
	if err != nil || !un.Removed {
		t.Fatalf("unschedule = %+v, %v", un, err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if n := len(sa.Jobs()) + len(sb.Jobs()); n != 0 {
			return fmt.Errorf("%d jobs still running", n)
		}
		return nil
	})
	un, err = engine.Call[cron.UnscheduleResponse](ctx, caller, cron.FnUnschedule, cron.UnscheduleRequest{ID: "j1"})
	if err != nil || un.Removed {
		t.Fatalf("second unschedule = %+v, %v", un, err)
	}
}

func TestServeBadInput(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	if _, err := cron.Serve(ctx, e, nil); err != nil {
		t.Fatal(err)
	}
	good := func(mod func(j map[string]any)) map[string]any {
		j := map[string]any{"id": "ok", "expression": "@hourly", "function_id": "test::x"}
		mod(j)
		return j
	}
	tests := []struct {
		name string
		fn   string
		req  any
	}{
		{"invalid expression", cron.FnSchedule, good(func(j map[string]any) { j["expression"] = "61 * * * *" })},
		{"never fires", cron.FnSchedule, good(func(j map[string]any) { j["expression"] = "0 0 30 2 *" })},
		{"empty expression", cron.FnSchedule, good(func(j map[string]any) { delete(j, "expression") })},
		{"every too short", cron.FnSchedule, good(func(j map[string]any) { j["expression"] = "@every 1ms" })},
		{"invalid function id", cron.FnSchedule, good(func(j map[string]any) { j["function_id"] = "a::::b" })},
		{"function id with space", cron.FnSchedule, good(func(j map[string]any) { j["function_id"] = "a b" })},
		{"missing function id", cron.FnSchedule, good(func(j map[string]any) { delete(j, "function_id") })},
		{"invalid job id", cron.FnSchedule, good(func(j map[string]any) { j["id"] = "a.b" })},
		{"wildcard job id", cron.FnSchedule, good(func(j map[string]any) { j["id"] = "*" })},
		{"empty job id", cron.FnSchedule, good(func(j map[string]any) { j["id"] = "" })},
		{"long job id", cron.FnSchedule, good(func(j map[string]any) { j["id"] = strings.Repeat("x", 129) })},
		{"unknown timezone", cron.FnSchedule, good(func(j map[string]any) { j["timezone"] = "Mars/Olympus" })},
		{"local timezone", cron.FnSchedule, good(func(j map[string]any) { j["timezone"] = "Local" })},
		{"path timezone", cron.FnSchedule, good(func(j map[string]any) { j["timezone"] = "../../etc/passwd" })},
		{"data too big", cron.FnSchedule, good(func(j map[string]any) { j["data"] = strings.Repeat("x", cron.MaxDataBytes) })},
		{"wrong type", cron.FnSchedule, good(func(j map[string]any) { j["expression"] = 5 })},
		{"unschedule bad id", cron.FnUnschedule, map[string]any{"id": "a/b"}},
		{"unschedule no id", cron.FnUnschedule, map[string]any{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.Trigger(ctx, tt.fn, tt.req, nil)
			if !errors.Is(err, wire.ErrInvalidPayload) {
				t.Fatalf("err = %v, want invalid_payload", err)
			}
		})
	}
	// Not JSON at all, from a JSON client.
	reply, err := e.Conn().Request("iii.fn.cron.schedule", []byte(`{"id":`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if werr := wire.Decode(reply); !errors.Is(werr, wire.ErrInvalidPayload) {
		t.Fatalf("truncated json: %v", werr)
	}
	// Nothing half-written.
	if jobs, err := cron.List(ctx, e); err != nil || len(jobs) != 0 {
		t.Fatalf("jobs after bad input = %+v, %v", jobs, err)
	}
	// The Go API refuses the same input with the same codes.
	err = cron.Schedule(ctx, e, cron.Job{ID: "x", Expression: "bad", FunctionID: "test::x"})
	if !errors.Is(err, wire.ErrInvalidPayload) || !errors.Is(err, cron.ErrInvalidExpression) {
		t.Fatalf("Schedule: %v", err)
	}
	err = cron.Schedule(ctx, e, cron.Job{ID: "x.y", Expression: "@daily", FunctionID: "test::x"})
	if !errors.Is(err, wire.ErrInvalidPayload) || !errors.Is(err, cron.ErrInvalidJob) {
		t.Fatalf("Schedule: %v", err)
	}
	if _, err := cron.Unschedule(ctx, e, ""); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("Unschedule: %v", err)
	}
}

// TestScheduleKeepsLargeIntegers: a cron::schedule request in JSON keeps
// the digits of an integer past 2^53 in data, up to the event.
func TestScheduleKeepsLargeIntegers(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	ctx := context.Background()
	e := enginetest.NewEngine(t, ns)
	if _, err := cron.Serve(ctx, e, nil); err != nil {
		t.Fatal(err)
	}
	req := []byte(`{"id":"big","expression":"@daily","function_id":"test::tick",` +
		`"data":{"id":12345678901234567,"u":18446744073709551615,"f":1.5}}`)
	if _, _, err := e.TriggerRaw(ctx, cron.FnSchedule, req, wire.JSON); err != nil {
		t.Fatal(err)
	}
	jobs, err := cron.List(ctx, e)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("List = %+v, %v", jobs, err)
	}
	got, _ := json.Marshal(jobs[0].Data)
	if want := `{"f":1.5,"id":12345678901234567,"u":18446744073709551615}`; string(got) != want {
		t.Fatalf("data = %s, want %s", got, want)
	}
}

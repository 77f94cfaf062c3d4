package approval_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/approval"
)

// Example parks a call by hand, as the orchestrator does, lists it,
// resolves it, and reads the decided record back.
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	e := x.Engine
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	w := approval.NewWorker()
	if err := w.Start(ctx, e); err != nil {
		panic(err)
	}
	defer w.Close(ctx)

	// The orchestrator's side: a parked call.
	kv, err := e.EnsureKV(ctx, approval.ApprovalsBucketConfig())
	if err != nil {
		panic(err)
	}
	args := map[string]any{"path": "/etc/hosts"}
	hash, _ := agent.ArgsHash("fs::write", args)
	rec, _ := json.Marshal(agent.ApprovalRecord{
		SessionID: "s1", RunID: "r1", FunctionCallID: "toolu_01", FunctionID: "fs::write",
		Args: args, ArgsHash: hash, RequestedAt: 1700000000000, Status: agent.ApprovalPending,
	})
	key, _ := subjects.ApprovalKey("s1", "toolu_01")
	if _, err := kv.Create(ctx, key, rec); err != nil {
		panic(err)
	}

	// A human's side: list, then decide the exact call shown.
	list, err := engine.Call[approval.ListPendingResponse](ctx, e, approval.ListPendingFunction, approval.ListPendingRequest{})
	if err != nil {
		panic(err)
	}
	p := list.Pending[0]
	fmt.Println("pending:", p.SessionID, p.FunctionCallID, p.FunctionID, p.Args["path"])
	_, err = engine.Call[approval.ResolveResponse](ctx, e, approval.ResolveFunction, approval.ResolveRequest{
		SessionID: p.SessionID, FunctionCallID: p.FunctionCallID, Decision: agent.DecisionAllow,
		Reason: "fine", ArgsHash: p.ArgsHash,
	})
	fmt.Println("resolve:", err)
	_, err = engine.Call[approval.ResolveResponse](ctx, e, approval.ResolveFunction, approval.ResolveRequest{
		SessionID: p.SessionID, FunctionCallID: p.FunctionCallID, Decision: agent.DecisionDeny,
	})
	fmt.Println("again:", err)

	ent, err := kv.Get(ctx, key)
	if err != nil {
		panic(err)
	}
	var got agent.ApprovalRecord
	if err := json.Unmarshal(ent.Value(), &got); err != nil {
		panic(err)
	}
	fmt.Println("record:", got.Status, got.Decision, got.Reason)
	// Output:
	// pending: s1 toolu_01 fs::write /etc/hosts
	// resolve: <nil>
	// again: not_pending: call "toolu_01" of session "s1" was already decided (allow)
	// record: decided allow fine
}

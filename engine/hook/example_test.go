package hook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/hook"
)

// A plain NATS subscriber blocks writes outside the workspace; the
// orchestrator's before-call hook hears it and denies the call.
func Example() {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(5 * time.Second) {
		panic("server not ready")
	}

	// The subscriber: any NATS client, no engine package needed.
	sc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		panic(err)
	}
	defer sc.Close()
	_, err = sc.Subscribe("iii.hook.agent.before_function_call", func(m *nats.Msg) {
		var call hook.BeforeCall
		if json.Unmarshal(m.Data, &call) != nil {
			_ = m.Respond([]byte(`{}`))
			return
		}
		reply := hook.BeforeReply{}
		if call.FunctionID == "fs::write" && call.Args["path"] != "/workspace/notes.md" {
			reply = hook.BeforeReply{Block: true, Reason: "writes stay in /workspace"}
		}
		body, _ := json.Marshal(reply)
		_ = m.Respond(body)
	})
	if err != nil {
		panic(err)
	}
	if err := sc.Flush(); err != nil {
		panic(err)
	}

	// The caller.
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	res, err := hook.PublishCollect(context.Background(), nc, hook.Request{
		Topic:     hook.TopicBeforeCall,
		Payload:   hook.BeforeCall{SessionID: "s1", FunctionCallID: "c1", FunctionID: "fs::write", Args: map[string]any{"path": "/etc/passwd"}},
		MergeRule: hook.BeforeCallMergeRule,
		TimeoutMs: 2000,
	})
	if err != nil {
		panic(err)
	}
	merged, _ := json.Marshal(res.Merged)
	fmt.Println(len(res.Replies), "reply; merged:", string(merged))
	var before hook.BeforeReply
	if err := res.Bind(&before); err != nil || before.Block {
		fmt.Println("denied:", before.Reason)
	}
	// Output:
	// 1 reply; merged: {"block":true,"reason":"writes stay in /workspace"}
	// denied: writes stay in /workspace
}

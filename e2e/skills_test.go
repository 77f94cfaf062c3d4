package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/directory"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/policy"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

const allowAll = "version: 1\nrules:\n  - \"*\"\n"

// A skill published by a worker written as a plain NATS client (a KV put,
// no iii code) is listed by the directory and is in the index of the next
// run's system prompt, while its function is served. The skill of a
// function no worker serves (its worker gone, its skill left in the
// bucket) is listed but not offered in the prompt.
func TestPublishedSkillReachesNextRunPrompt(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	n := newNode(t, ns)
	env := workers.Env{Home: t.TempDir()}
	prompts := make(chan string, 64)
	p, err := scripted.New(scripted.WithScript("capture", func(req scripted.StreamRequest) (scripted.Reply, error) {
		prompts <- req.SystemPrompt
		return scripted.Reply{Text: "ok"}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	n.start(policy.NewWorker("", policy.WithFallback([]byte(allowAll))), env)
	n.start(directory.NewWorker(), env)
	n.start(sessiontree.NewWorker(), env)
	n.start(scripted.NewWorker(p), env)
	// The function the skill describes, served (here by an iii worker;
	// any NATS client serving iii.fn.weather.now would do).
	w, err := n.e.Worker("weather")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "weather::now", Handler: func(context.Context, *engine.Request) (any, error) {
		return map[string]string{"sky": "clear"}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	n.start(orchestrator.New(), env)

	// The plain client: nats.go only.
	ctx := context.Background()
	js, err := jetstream.New(enginetest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, subjects.SkillsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := subjects.SkillKey("weather", "weather::now")
	if _, err := kv.Put(ctx, key, []byte("---\ntitle: Current weather\ndescription: The weather at a place, now.\n---\nCall weather::now with {\"place\": \"Oslo\"}.\n")); err != nil {
		t.Fatal(err)
	}
	gone, _ := subjects.SkillKey("weather", "weather::tomorrow")
	if _, err := kv.Put(ctx, gone, []byte("---\ntitle: Tomorrow's weather\n---\nNo longer served.\n")); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		var list struct {
			Skills []struct {
				ID string `json:"id"`
			} `json:"skills"`
		}
		if err := n.e.Trigger(ctx, "directory::skills::list", map[string]any{"worker": "weather"}, &list); err != nil {
			return err
		}
		if len(list.Skills) != 2 || list.Skills[0].ID != "weather/weather::now" || list.Skills[1].ID != "weather/weather::tomorrow" {
			return fmt.Errorf("list %+v", list)
		}
		return nil
	})
	i := 0
	enginetest.Eventually(t, 15*time.Second, func() error {
		i++
		n.runToEnd(agent.RunStart{SessionID: fmt.Sprintf("sk%d", i), Provider: "scripted", Model: "capture",
			Messages: []agent.Message{userText("what is the weather?")}}, 20*time.Second)
		got := <-prompts
		if !strings.Contains(got, "[Current weather](iii://weather/weather::now): The weather at a place, now.") {
			return fmt.Errorf("prompt lacks the skill:\n%s", got)
		}
		if strings.Contains(got, "weather::tomorrow") {
			t.Fatalf("prompt offers the skill of a function no worker serves:\n%s", got)
		}
		return nil
	})
}

package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

// foreignSID is a fresh session id: no session has it, but any could.
const foreignSID = "fw1"

// foreignValues are what another client may write (`nats kv put`, `nats
// pub`): no JSON, the empty object and array, null, a record of no
// session, wrong-typed fields named as the stores name theirs, a value
// far larger than any record, nothing, and msgpack that is no record.
var foreignValues = []struct{ name, value string }{
	{"{}", `{}`},
	{"garbage", `garbage`},
	{"null", `null`},
	{"[]", `[]`},
	{"bad session id", `{"session_id":"a b"}`},
	{"wrong types", `{"session_id":1,"run_id":[],"state":{},"id":false,"v":"x","function_id":[],"expression":7,` +
		`"provider":1,"model":[],"messages":"m","status":3,"entries":{},"trace_id":[],"span_id":1,"type":9,` +
		`"ceiling_usd":"much","period":[],"spent_usd":"x","method":1,"path":[],"content":7,"created_at_ms":"now"}`},
	{"100 KiB string", `"` + strings.Repeat("x", 100<<10) + `"`},
	{"empty", ``},
	// A record of foreignSID that decodes as a mid-flight turn, a step,
	// an entry: no run of this node wrote it.
	{"plausible", `{"session_id":"` + foreignSID + `","run_id":"fwrun","step":1,"state":"assistant_streaming","id":"` + foreignSID + `","v":1,"updated_at_ms":1}`},
	// msgpack {"v":99,"session_id":"a b"}: what a msgpack store reads
	// as a record of a version it does not know.
	{"msgpack", "\x82\xa1v\x63\xaasession_id\xa3a b"},
}

// foreignKeys are the keys, beyond the plain ones every bucket gets
// (foreignSID, the first session's id, a key with dots), that have the
// structure of the keys bucket's worker writes (its package's key
// helpers), with sid for the session they name. A bucket this map does
// not list gets the plain keys only.
func foreignKeys(t *testing.T, bucket, sid string) []string {
	t.Helper()
	must := func(k string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	switch bucket {
	case subjects.InboxBucket: // workers/orchestrator inboxKey
		return []string{sid + "." + orchestrator.InboxSteering, sid + "." + orchestrator.InboxFollowup}
	case subjects.ApprovalsBucket:
		return []string{must(subjects.ApprovalKey(sid, "fwcall"))}
	case subjects.RunsBucket: // "<sid>.<hex of the idempotency key's hash>"
		return []string{sid + ".0123456789abcdef01234567"}
	case subjects.SandboxesBucket: // workers/sandbox recordKey, beatKey (a node's heartbeat; this node's own too)
		keys := []string{"session." + sid, "node.fwnode"}
		if host, err := os.Hostname(); err == nil && host != "" && !strings.ContainsAny(host, "*> ") {
			keys = append(keys, "node."+host)
		}
		return keys
	case subjects.BudgetsBucket: // workers/budget defKey, spendKey, resKey
		return []string{"def.fwb", "spend.fwb." + time.Now().UTC().Format("20060102"), "res.fwr"}
	case subjects.CronBucket: // engine/cron leaseKey
		return []string{fmt.Sprintf("fwjob.%d", time.Now().UnixMilli())}
	case subjects.CronJobsBucket:
		return []string{"fwjob"}
	case subjects.HTTPRoutesBucket: // engine/httpgw: method token and shape
		return []string{"GET.fw", "_any.fw.=3A"}
	case subjects.ModelsBucket: // workers/models recordKey: the model every run here uses
		return []string{"scripted.echo", "scripted.fw"}
	case subjects.SkillsBucket:
		return []string{must(subjects.SkillKey("orchestrator", "run::start")), must(subjects.SkillKey("fw", "fw::x"))}
	case subjects.StateBucket:
		return []string{must(subjects.StateKVKey("fw", "a/b"))}
	}
	return nil
}

// foreignSubjects are subjects of stream, beyond its subject patterns
// with each wildcard filled with foreignSID and with the first session's
// id, that have the structure its writers use.
var foreignSubjects = map[string][]string{
	subjects.SpanStream: {subjects.SpanSubjectPrefix + "0123456789abcdef0123456789abcdef"},
}

// foreignExcluded are the writes the sweep does not make, keyed
// "<bucket or stream> <key or subject>" ("<sid>" for the first
// session's id), each with its reason: a write only an operator who means
// to destroy would make, and that the project documents as such. Add an
// entry only with a reason that holds.
//
// Empty: the sweep asserts what must hold whatever was written (the node
// serves new sessions, starts again, leaves no consumer looping), not
// that the first session goes on. What the documented writes do to it is
// its documented outcome: a turn record that does not decode answers
// internal with its reset (`nats kv del iii-turn-state <sid>`, PROTOCOL
// §8), a meta that does not decode fails its runs with its repair (`nats
// kv del iii-sessions <sid>`, PROTOCOL §12).
var foreignExcluded = map[string]string{}

// foreignWrite is one write of the sweep.
type foreignWrite struct {
	target string      // bucket or stream
	kv     bool        // target is a bucket
	key    string      // KV key or subject
	hdr    nats.Header // a stream message's headers
}

// A node takes any bytes any client writes to any key of its buckets or
// any subject of its streams: it goes on serving runs, it starts again on
// what was written, and no consumer is left redelivering a foreign message
// or holding one unacknowledged.
func TestForeignWrites(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	var logs enginetest.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	home := enginetest.NodeHome(t)
	up := startUp(t, ns, home, logger)
	// The writer is another process: a plain client.
	client := &node{t: t, e: enginetest.NewEngine(t, ns)}
	js := client.e.JetStream()
	ctx := context.Background()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node warnings:\n%s", excerptLines(logs.String(), 60))
		}
	})

	// A first turn, so every bucket and stream exists and one session
	// has a record in each store.
	first := runSession(t, client, "first")

	writes := foreignWrites(t, js, first)
	// One round per value, each on the node the last one restarted (a
	// subtest's clean-up would stop it), with what every round before
	// it wrote still in place.
	for _, v := range foreignValues {
		n := 0
		for _, w := range writes {
			if err := writeForeign(ctx, js, w, v.value); err != nil {
				// A bucket's own limit (the skills bucket's max value
				// size) refusing it is no finding.
				t.Logf("%s: %s %s: not written: %v", v.name, w.target, w.key, err)
				continue
			}
			n++
		}
		t.Logf("%s: %d foreign writes", v.name, n)
		checkServes(t, client, "after "+v.name)
		if err := up.close(ctx); err != nil {
			t.Logf("%s: closing the node: %v", v.name, err)
		}
		up = startUp(t, ns, home, logger)
		checkServes(t, client, "after a restart on "+v.name)
	}
	checkConsumersQuiet(t, js)
}

// runSession creates a session and runs one scripted turn on it to
// agent_end.
func runSession(t *testing.T, client *node, name string) string {
	t.Helper()
	ctx := context.Background()
	var created struct {
		SessionID string `json:"session_id"`
	}
	if err := client.e.Trigger(ctx, "session::create", map[string]any{"display_name": name}, &created); err != nil || created.SessionID == "" {
		t.Fatalf("session::create %s = %+v, %v", name, created, err)
	}
	evs := client.runToEnd(agent.RunStart{SessionID: created.SessionID, Provider: "scripted", Model: "echo",
		Messages: []agent.Message{userText("hello " + name)}}, 20*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
		t.Fatalf("the run %s stopped with %q", name, last.StopReason)
	}
	return created.SessionID
}

// checkServes fails t unless the node lists its functions and runs a
// new session's turn to its end.
func checkServes(t *testing.T, client *node, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fns, err := client.e.FunctionsList(ctx)
	if err != nil || len(fns) < 50 {
		t.Fatalf("engine::functions::list %s: %d functions, %v", when, len(fns), err)
	}
	// The listings read every key of their stores: one foreign value
	// must not fail them.
	for id, v := range validPayloads {
		if v.stores != "" || !slices.Contains(v.payloads, "{}") {
			continue
		}
		if err := client.e.Trigger(ctx, id, map[string]any{}, nil); err != nil {
			t.Errorf("%s %s: %v", id, when, err)
		}
	}
	runSession(t, client, when)
}

// foreignWrites lists the sweep's writes (without their value): every
// KV bucket the node made and every other stream, enumerated from the
// server so that a new store is swept too.
func foreignWrites(t *testing.T, js jetstream.JetStream, sid string) []foreignWrite {
	t.Helper()
	ctx := context.Background()
	var out []foreignWrite
	used := map[string]bool{}
	add := func(target string, kv bool, key string, hdrs ...nats.Header) {
		pattern := strings.ReplaceAll(key, sid, "<sid>")
		if _, ok := foreignExcluded[target+" "+pattern]; ok {
			used[target+" "+pattern] = true
			return
		}
		for _, h := range hdrs {
			out = append(out, foreignWrite{target: target, kv: kv, key: key, hdr: h})
		}
	}
	var buckets []string
	names := js.KeyValueStoreNames(ctx)
	for name := range names.Name() {
		buckets = append(buckets, name)
	}
	if err := names.Error(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(buckets)
	for _, b := range buckets {
		keys := append([]string{foreignSID, sid, "fw.a.b"}, foreignKeys(t, b, foreignSID)...)
		keys = append(keys, foreignKeys(t, b, sid)...)
		slices.Sort(keys)
		for _, k := range slices.Compact(keys) {
			add(b, true, k, nil)
		}
	}
	msgpack := nats.Header{wire.HeaderContentType: []string{wire.ContentMsgpack}}
	streams := js.StreamNames(ctx)
	var swept []string
	for name := range streams.Name() {
		if strings.HasPrefix(name, "KV_") {
			continue // a bucket's: swept as the bucket
		}
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		var subs []string
		for _, pat := range s.CachedInfo().Config.Subjects {
			for _, fill := range []string{foreignSID, sid} {
				subs = append(subs, strings.NewReplacer("*", fill, ">", fill).Replace(pat))
			}
		}
		// The subjects the stream's consumers read, where they name one.
		cl := s.ListConsumers(ctx)
		for c := range cl.Info() {
			for _, f := range append([]string{c.Config.FilterSubject}, c.Config.FilterSubjects...) {
				if f != "" && !strings.ContainsAny(f, "*>") {
					subs = append(subs, f)
				}
			}
		}
		if err := cl.Err(); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, foreignSubjects[name]...)
		slices.Sort(subs)
		for _, subj := range slices.Compact(subs) {
			add(name, false, subj, nil, msgpack)
		}
		swept = append(swept, name)
	}
	if err := streams.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(swept)
	t.Logf("buckets swept: %v", buckets)
	t.Logf("streams swept: %v", swept)
	for k := range foreignExcluded {
		if !used[k] {
			t.Errorf("foreignExcluded names %q, which the sweep does not write", k)
		}
	}
	for stream := range foreignSubjects {
		if !slices.Contains(swept, stream) {
			t.Errorf("foreignSubjects names stream %s, which the node did not make", stream)
		}
	}
	return out
}

// writeForeign makes w with value, as `nats kv put` or `nats pub` would.
func writeForeign(ctx context.Context, js jetstream.JetStream, w foreignWrite, value string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if w.kv {
		kv, err := js.KeyValue(ctx, w.target)
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, w.key, []byte(value))
		return err
	}
	_, err := js.PublishMsg(ctx, &nats.Msg{Subject: w.key, Header: w.hdr, Data: []byte(value)})
	return err
}

// checkConsumersQuiet fails t when, on an idle node, a consumer still
// holds a message unacknowledged or is redelivering: a worker stuck on a
// foreign message, or one that refuses it again and again.
func checkConsumersQuiet(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	snapshot := func() map[string]*jetstream.ConsumerInfo {
		out := map[string]*jetstream.ConsumerInfo{}
		streams := js.StreamNames(ctx)
		for name := range streams.Name() {
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			cl := s.ListConsumers(ctx)
			for c := range cl.Info() {
				if c.Config.Durable != "" {
					out[name+"/"+c.Name] = c
				}
			}
		}
		return out
	}
	// What the last turn left in flight settles (a loaded machine may take
	// a while); a consumer stuck on a message never gets there.
	enginetest.Eventually(t, 15*time.Second, func() error {
		for id, c := range snapshot() {
			if c.NumAckPending > 0 {
				return fmt.Errorf("consumer %s: %d unacknowledged, %d redelivered", id, c.NumAckPending, c.NumRedelivered)
			}
		}
		return nil
	})
	before := snapshot()
	time.Sleep(3 * time.Second)
	after := snapshot()
	for id, a := range after {
		b, ok := before[id]
		if !ok {
			continue
		}
		redelivered := (a.Delivered.Consumer - b.Delivered.Consumer) - (a.Delivered.Stream - b.Delivered.Stream)
		if redelivered > 0 || a.NumAckPending > 0 {
			t.Errorf("consumer %s on an idle node: %d redeliveries in 3 s, %d unacknowledged, %d redelivered, %d pending",
				id, redelivered, a.NumAckPending, a.NumRedelivered, a.NumPending)
		}
	}
}

// excerptLines is the last n lines of s.
func excerptLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > 400 {
			lines[i] = l[:400] + "…"
		}
	}
	return strings.Join(lines, "\n")
}

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/internal/answer"
)

// sandbox::list answers every record or an error, never a shorter list:
// a context that ends while the keys are listed, or while the records are
// read, made it answer what it had read so far as the whole list.
func TestListIsWholeOrAnError(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	kv, err := e.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "sandbox-list-test"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	for i := range n {
		sid := fmt.Sprintf("s%03d", i)
		b, err := json.Marshal(Sandbox{SandboxID: newSandboxID(sid), SessionID: sid, Node: "n1"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, recordKey(sid), b); err != nil {
			t.Fatal(err)
		}
	}
	m := newManager(options{}, kv, slog.New(slog.DiscardHandler))
	whole, cut := 0, 0
	for _, d := range []time.Duration{0, time.Microsecond, 50 * time.Microsecond, 200 * time.Microsecond, time.Millisecond,
		2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 10 * time.Second} {
		ctx, cancel := context.WithTimeout(ctx, d)
		res, err := m.list(ctx, ListRequest{}, answer.NewPager(wire.JSON, 1<<20))
		cancel()
		switch {
		case err == nil && len(res.Sandboxes) == n:
			whole++
		case err == nil:
			t.Errorf("deadline %v: %d of %d sandboxes and no error", d, len(res.Sandboxes), n)
		default:
			var we *wire.Error
			if !errors.As(err, &we) || (we.Code != wire.CodeTimeout && we.Code != wire.CodeCanceled) {
				t.Errorf("deadline %v: %v, want a timeout", d, err)
			}
			cut++
		}
	}
	if whole == 0 || cut == 0 {
		t.Errorf("%d whole lists, %d cut short: the deadlines no longer cover both", whole, cut)
	}
}

// sandbox::list pages to the max payload in the caller's codec: past
// about 2,500 sandboxes its answer used to exceed 1 MiB (internal). A
// truncated page goes on with after; the pages hold every record once,
// in session order, and skip a record that does not decode.
func TestListPages(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	kv, err := e.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "sandbox-page-test"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n {
		sid := fmt.Sprintf("s%03d", i)
		b, err := json.Marshal(Sandbox{SandboxID: newSandboxID(sid), SessionID: sid, Node: "n1", Workdir: "/var/lib/iii/sandboxes/" + sid})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, recordKey(sid), b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, recordKey("s150x"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	m := newManager(options{}, kv, slog.New(slog.DiscardHandler))
	const maxPayload = 16 << 10
	for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
		var seen []string
		after, pages := "", 0
		for {
			res, err := m.list(ctx, ListRequest{After: after}, answer.NewPager(codec, maxPayload))
			if err != nil {
				t.Fatalf("%s: page %d: %v", codec.ContentType(), pages, err)
			}
			pages++
			if b, err := codec.Marshal(res); err != nil || len(b) > maxPayload-answer.Headroom {
				t.Fatalf("%s: page of %d bytes (%v), max payload %d", codec.ContentType(), len(b), err, maxPayload)
			}
			for _, sb := range res.Sandboxes {
				seen = append(seen, sb.SessionID)
			}
			if !res.Truncated {
				break
			}
			if len(res.Sandboxes) == 0 || pages > n {
				t.Fatalf("%s: a truncated page of %d sandboxes", codec.ContentType(), len(res.Sandboxes))
			}
			after = res.Sandboxes[len(res.Sandboxes)-1].SessionID
		}
		if pages < 3 || len(seen) != n {
			t.Fatalf("%s: %d sandboxes in %d pages, want %d in several", codec.ContentType(), len(seen), pages, n)
		}
		for i, sid := range seen {
			if want := fmt.Sprintf("s%03d", i); sid != want {
				t.Fatalf("%s: sandbox %d is %s, want %s", codec.ContentType(), i, sid, want)
			}
		}
	}
	// after past the end, and with session_id.
	if res, err := m.list(ctx, ListRequest{After: "s299"}, answer.NewPager(wire.JSON, maxPayload)); err != nil || len(res.Sandboxes) != 0 || res.Truncated {
		t.Fatalf("after the last: %+v %v", res, err)
	}
	if res, err := m.list(ctx, ListRequest{SessionID: "s007", After: "s006"}, answer.NewPager(wire.JSON, maxPayload)); err != nil || len(res.Sandboxes) != 1 {
		t.Fatalf("session s007 after s006: %+v %v", res, err)
	}
}

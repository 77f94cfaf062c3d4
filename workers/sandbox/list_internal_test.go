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
		res, err := m.list(ctx, ListRequest{})
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

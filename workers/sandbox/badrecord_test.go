package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// A session record that does not decode (not JSON, or one naming another
// session) no longer blocks its session: create, exec and destroy all
// answered internal until someone deleted the key by hand. Now exec
// answers not_found (it names the record and what replaces it), create
// replaces the record, destroy deletes it, and the reaper deletes one
// older than max_age plus orphan_after (a younger one may be a live
// sandbox's, written by a version this node cannot read), after which
// the workdir it kept goes.
func TestBadRecord(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Now()}
	f := newFixture(t, WithClock(c.now))
	ctx := context.Background()
	bad := map[string][]byte{
		"b1": []byte("{not json"),
		"b2": []byte(`{"sandbox_id":"other_0123456789","session_id":"other","node":"test-node"}`),
		"b3": []byte(`[]`),
	}
	for sid, v := range bad {
		if _, err := f.kv.Put(ctx, recordKey(sid), v); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(sid string) bool {
		_, err := f.kv.Get(ctx, recordKey(sid))
		return err != nil
	}

	// exec: not_found, saying why and what to do.
	for _, call := range []func() error{
		func() error {
			_, err := engine.Call[Result](engine.WithSession(ctx, "b1", "m1"), f.e, ShellExecFunction, Command{Command: "true"})
			return err
		},
		func() error { _, err := f.execErr("b1_0123456789", Command{Command: "true"}); return err },
	} {
		err := call()
		wantCode(t, err, wire.CodeNotFound)
		if !strings.Contains(err.Error(), "does not decode") || !strings.Contains(err.Error(), "sandbox::create replaces it") {
			t.Fatalf("exec error %v", err)
		}
	}
	if _, err := f.w.Workdir(ctx, "b2"); !errorsIs(err, ErrBadRecord, ErrNoSandbox) {
		t.Fatalf("workdir of b2: %v", err)
	}

	// create replaces it, and the session works again.
	sb := f.create(t, CreateRequest{SessionID: "b1"})
	if r := f.sh(t, "b1", "true"); r.ExitCode != 0 {
		t.Fatalf("exec after create: %+v", r)
	}
	if rec, _, ok, err := getRecord(ctx, f.kv, "b1"); !ok || err != nil || rec.SandboxID != sb.SandboxID {
		t.Fatalf("record of b1 after create: %+v %v %v", rec, ok, err)
	}

	// destroy deletes it.
	res, err := engine.Call[DestroyResponse](ctx, f.e, DestroyFunction, DestroyRequest{SessionID: "b2"})
	if err != nil || !res.Destroyed || !gone("b2") {
		t.Fatalf("destroy b2: %+v %v, record gone %v", res, err, gone("b2"))
	}

	// The reaper keeps a young one and the workdir it may name; past
	// max_age plus orphan_after, both go.
	dir := filepath.Join(f.root, "b3_0123456789")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := f.m.reap(ctx)
	if err != nil || st.BadRecords != 0 || gone("b3") || !exists(dir) {
		t.Fatalf("young: stats %+v %v, record gone %v, workdir %v", st, err, gone("b3"), exists(dir))
	}
	c.advance(DefaultMaxAge + DefaultOrphanAfter + time.Minute)
	if st, err = f.m.reap(ctx); err != nil || st.BadRecords != 1 || !gone("b3") {
		t.Fatalf("old: stats %+v %v, record gone %v", st, err, gone("b3"))
	}
	if st, err = f.m.reap(ctx); err != nil || st.OrphanWorkdirs != 1 || exists(dir) {
		t.Fatalf("then: stats %+v %v, workdir %v", st, err, exists(dir))
	}
}

func errorsIs(err error, targets ...error) bool {
	for _, target := range targets {
		if !errors.Is(err, target) {
			return false
		}
	}
	return err != nil
}

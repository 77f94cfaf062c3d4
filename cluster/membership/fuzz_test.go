package membership_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/cluster/membership"
)

// FuzzDecodeEntry feeds arbitrary bytes to the entry decoder the watch
// uses on every bucket value: it never panics, refuses with
// ErrInvalidEntry, and whatever it accepts encodes and decodes to the
// same entry and the same bytes.
func FuzzDecodeEntry(f *testing.F) {
	valid, err := (&membership.Entry{ID: "m1", Host: "127.0.0.1", Port: 8090, Kinds: []string{"echo", "session"},
		Status: membership.StatusUp, Meta: map[string]string{"node": "n1"},
		Started: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}).Encode()
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(valid),
		`{"id":"m1","host":"h","port":1,"kinds":null,"status":"draining","started":"0001-01-01T00:00:00Z"}`,
		`{"id":"m1","host":"h","port":1,"kinds":[],"status":"up","meta":{},"started":"2026-01-01T00:00:00+02:00","extra":[1,2]}`,
		`{"ID":"m1","HOST":"h","Port":65535,"status":"up"}`,
		`{"id":"m1","host":"h","port":70000,"status":"up"}`,
		`{"id":"m.1","host":"h","port":1,"status":"up"}`,
		`{"id":"m1","host":"h h","port":1,"status":"up"}`,
		`{"id":"m1","host":"h","port":1,"kinds":[""],"status":"up"}`,
		`{"id":"m1","host":"h","port":1,"status":"up","started":"9999-12-31T23:59:59-23:59"}`,
		`{"id":"m1","host":"h","port":1e3,"status":"up"}`,
		"{\"id\":\"m1\",\"host\":\"h\xff\",\"port\":1,\"status\":\"up\"}",
		`{}`, `null`, `[]`, `"x"`, ``, `{`,
		// Under the decoder's bound, but six times longer once encoded
		// ("<" is written \u003c): refused, as the encoder refuses it.
		`{"id":"m1","host":"h","port":1,"status":"up","meta":{"k":"` + strings.Repeat("<", 20<<10) + `"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := membership.DecodeEntry(data)
		if err != nil {
			if !errors.Is(err, membership.ErrInvalidEntry) {
				t.Fatalf("error %v is not ErrInvalidEntry", err)
			}
			return
		}
		b, err := e.Encode()
		if err != nil {
			t.Fatalf("accepted entry %+v does not encode: %v", e, err)
		}
		e2, err := membership.DecodeEntry(b)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
		if b2, err := e2.Encode(); err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("encodings differ: %s vs %s (%v)", b, b2, err)
		}
		if !e2.Started.Equal(e.Started) {
			t.Fatalf("start time %v became %v", e.Started, e2.Started)
		}
		e.Started, e2.Started = time.Time{}, time.Time{} // locations may differ
		if !reflect.DeepEqual(e, e2) {
			t.Fatalf("round trip changed %+v into %+v", e, e2)
		}
	})
}

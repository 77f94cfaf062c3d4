package turn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/vmihailenco/msgpack/v5"
)

// codecs store a record the way KV would: JSON, and msgpack reading the json
// tags (the settings of engine/wire).
var codecs = map[string]struct {
	marshal   func(any) ([]byte, error)
	unmarshal func([]byte, any) error
}{
	"json": {json.Marshal, json.Unmarshal},
	"msgpack": {
		func(v any) ([]byte, error) {
			var buf bytes.Buffer
			enc := msgpack.NewEncoder(&buf)
			enc.SetCustomStructTag("json")
			enc.UseCompactInts(true)
			err := enc.Encode(v)
			return buf.Bytes(), err
		},
		func(b []byte, v any) error {
			dec := msgpack.NewDecoder(bytes.NewReader(b))
			dec.SetCustomStructTag("json")
			dec.SetMapDecoder(func(d *msgpack.Decoder) (any, error) {
				n, err := d.DecodeMapLen()
				if err != nil || n < 0 {
					return nil, err
				}
				m := make(map[string]any, n)
				for range n {
					k, err := d.DecodeString()
					if err != nil {
						return nil, err
					}
					if m[k], err = d.DecodeInterface(); err != nil {
						return nil, err
					}
				}
				return m, nil
			})
			return dec.Decode(v)
		},
	},
}

// TestResumeFromStorage stores the record after every input of every
// golden scenario, reads it back, and checks that the rest of the run gives
// the same records and effects as the run that never left memory: the
// record carries everything the machine needs.
func TestResumeFromStorage(t *testing.T) {
	t.Parallel()
	for name, codec := range codecs {
		for _, sc := range scenarios {
			t.Run(name+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
				rec, _, err := New(runStart(sc.maxTurns), testRun, t0)
				if err != nil {
					t.Fatal(err)
				}
				for i, in := range sc.inputs {
					now := t0 + int64(10*(i+1))
					b, err := codec.marshal(rec)
					if err != nil {
						t.Fatal(err)
					}
					var stored Record
					if err := codec.unmarshal(b, &stored); err != nil {
						t.Fatalf("decode: %v", err)
					}
					if err := stored.Validate(); err != nil {
						t.Fatalf("stored record: %v", err)
					}
					if got, want := Next(stored), Next(rec); got.Kind != want.Kind || len(got.Calls) != len(want.Calls) {
						t.Fatalf("Next after storage = %+v, want %+v", got, want)
					}
					want, wantEffects, err := Apply(rec, in, now)
					if err != nil {
						t.Fatal(err)
					}
					got, gotEffects, err := Apply(stored, in, now)
					if err != nil {
						t.Fatalf("Apply on the stored record: %v", err)
					}
					sameJSON(t, fmt.Sprintf("input %d (%s): record", i, describe(in)), got, want)
					sameJSON(t, fmt.Sprintf("input %d (%s): effects", i, describe(in)), gotEffects, wantEffects)
					rec = want
				}
			})
		}
	}
}

// sameJSON compares the canonical JSON of got and want (object keys
// sorted, so a struct and the map it decodes to compare equal).
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	canon := func(v any) string {
		var x any
		if err := json.Unmarshal([]byte(mustJSON(t, v)), &x); err != nil {
			t.Fatal(err)
		}
		return mustJSON(t, x)
	}
	a, b := canon(got), canon(want)
	if a == b {
		return
	}
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(i-80, 0)
	t.Fatalf("%s differs after storage at byte %d:\n got …%s\nwant …%s", what, i, a[from:min(i+80, len(a))], b[from:min(i+80, len(b))])
}

// TestRedelivery applies each input of a scenario twice, as an at-least-once
// step stream would: the copy is refused (or, for inputs that carry no id,
// refused by the next state) and the log is unchanged.
func TestRedelivery(t *testing.T) {
	t.Parallel()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			m := start(t, sc.maxTurns)
			for _, in := range sc.inputs {
				m.apply(in)
				switch in.(type) {
				case CallsStarted, CallDone, CallParked, ApprovalResolved:
				default:
					continue // not keyed by a call id: the state decides
				}
				if _, effects, err := Apply(m.rec, in, m.now+1); err == nil {
					t.Fatalf("duplicate %s accepted with effects %v", describe(in), eventTypes(effects))
				}
			}
		})
	}
}

func TestStoredEffectsAreData(t *testing.T) {
	t.Parallel()
	m := start(t, 0).applyAll(Provisioned{})
	rec, effects, err := Apply(m.rec, Abort{Reason: "x"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var back Record
	if err := json.Unmarshal([]byte(mustJSON(t, rec)), &back); err != nil {
		t.Fatal(err)
	}
	if mustJSON(t, back.Outbox) != mustJSON(t, effects) {
		t.Fatal("outbox does not survive storage")
	}
	if back.Outbox[len(back.Outbox)-1].Finish.StopReason != agent.StopAborted {
		t.Fatal("finish effect lost")
	}
}

// A record read back keeps its calls' arguments exact in either codec:
// an integer past 2^53 (an int64 id) is not rounded through a float64, so
// a call replayed after a crash runs with the arguments the model wrote.
func TestRecordKeepsArgumentsExact(t *testing.T) {
	args := map[string]any{"id": int64(1234567890123456789), "big": uint64(18446744073709551615), "f": 0.5}
	rec := Record{SessionID: "s", RunID: "r", State: agent.StateFunctionExecute, Work: &Work{Prepared: []Call{{ID: "c1", FunctionID: "f", Args: args}}}}
	for name, c := range codecs {
		b, err := c.marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		var got Record
		if err := c.unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if a := got.Work.Prepared[0].Args; fmt.Sprint(a["id"]) != "1234567890123456789" || fmt.Sprint(a["big"]) != "18446744073709551615" || a["f"] != 0.5 {
			t.Errorf("%s: args %#v", name, a)
		}
	}
	var c Call
	if err := json.Unmarshal([]byte(`{"id":"c","args":[1]}`), &c); err == nil {
		t.Error("array args decoded")
	}
}

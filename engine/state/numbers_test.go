package state_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/state"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// typed renders a decoded value as JSON with sorted keys, every integer (of
// any Go integer type) in decimal and every float marked with a trailing
// "f": it tells 9007199254740993 from a float that rounded to it, and an
// integer from an integral float.
func typed(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case string:
		return strconv.Quote(x)
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32) + "f"
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64) + "f"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = strconv.Quote(k) + ":" + typed(x[k])
		}
		return "{" + strings.Join(parts, ",") + "}"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = typed(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return fmt.Sprintf("?%T", v)
}

// typedJSON is typed of the JSON s decoded with the store's number rule.
func typedJSON(t testing.TB, s string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("bad test JSON %q: %v", s, err)
	}
	var exact func(any) any
	exact = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
				return i
			}
			if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
				return u
			}
			f, _ := x.Float64()
			return f
		case map[string]any:
			for k, e := range x {
				x[k] = exact(e)
			}
		case []any:
			for i, e := range x {
				x[i] = exact(e)
			}
		}
		return v
	}
	return typed(exact(v))
}

// numberCases are values whose numbers must survive the store exactly. json
// is what a JSON caller sends, value what a Go (msgpack) caller sends,
// stored the JSON the bucket holds, and want the value read back (typed).
var numberCases = []struct {
	name   string
	json   string
	value  any
	stored string
	want   string
}{
	{"2^53+1", `9007199254740993`, int64(1<<53 + 1), `9007199254740993`, `9007199254740993`},
	{"id", `12345678901234567`, int64(12345678901234567), `12345678901234567`, `12345678901234567`},
	{"nanoseconds", `1733561234567890123`, int64(1733561234567890123), `1733561234567890123`, `1733561234567890123`},
	{"max int64", `9223372036854775807`, int64(math.MaxInt64), `9223372036854775807`, `9223372036854775807`},
	{"min int64", `-9223372036854775808`, int64(math.MinInt64), `-9223372036854775808`, `-9223372036854775808`},
	{"max uint64", `18446744073709551615`, uint64(math.MaxUint64), `18446744073709551615`, `18446744073709551615`},
	{"negative", `-12345678901234567`, int64(-12345678901234567), `-12345678901234567`, `-12345678901234567`},
	{"small", `3`, 3, `3`, `3`},
	{"float", `1.5`, 1.5, `1.5`, `1.5f`},
	{"negative float", `-0.25`, -0.25, `-0.25`, `-0.25f`},
	{"large float", `1e300`, 1e300, `1e+300`, `1e+300f`},
	{"nested", `{"id":12345678901234567,"l":[9007199254740993,-1,0.5,{"u":18446744073709551615}],"f":2.5}`,
		map[string]any{"id": int64(12345678901234567), "l": []any{int64(1<<53 + 1), -1, 0.5, map[string]any{"u": uint64(math.MaxUint64)}}, "f": 2.5},
		`{"f":2.5,"id":12345678901234567,"l":[9007199254740993,-1,0.5,{"u":18446744073709551615}]}`,
		`{"f":2.5f,"id":12345678901234567,"l":[9007199254740993,-1,0.5f,{"u":18446744073709551615}]}`},
}

// TestFunctionsNumbersExact: integers past 2^53 keep every digit from a
// JSON or msgpack caller through the stored JSON to state::get, state::set,
// state::update, state::delete and state::list replies, the Go API, and
// trigger events (Go callback and function call); floats stay floats.
func TestFunctionsNumbersExact(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	serve(t, v)
	nc := enginetest.Connect(t, v.ns)
	caller := enginetest.NewEngine(t, v.ns) // msgpack, another process
	ctx := testCtx(t)

	var mu sync.Mutex
	fromFunc := map[string]string{} // key -> typed new value of its event
	if _, err := state.OnChangeFunc(ctx, v.e, v.store, state.Trigger{Scope: "num", FunctionID: "test::numbers"},
		func(_ context.Context, ev state.Event) error {
			mu.Lock()
			defer mu.Unlock()
			if ev.EventType == state.EventCreated {
				fromFunc[ev.Key] = typed(ev.NewValue)
			}
			return nil
		}, fastRetry); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	startHandler(t, v.e, "h", "test::on_numbers", rec)
	onChange(t, v, nil, state.Trigger{Scope: "num", FunctionID: "test::on_numbers"})

	for _, tc := range numberCases {
		t.Run(tc.name+"/json", func(t *testing.T) {
			key := tc.name + "/json"
			got, werr := jsonReq(t, nc, "iii.fn.state.set", `{"scope":"num","key":"`+key+`","value":`+tc.json+`}`)
			if want := `{"old_value":null,"new_value":` + tc.stored + `}`; werr != nil || got != want {
				t.Fatalf("set = %s, %v\nwant %s", got, werr, want)
			}
			got, werr = jsonReq(t, nc, "iii.fn.state.get", `{"scope":"num","key":"`+key+`"}`)
			if want := `{"value":` + tc.stored + `,"revision":`; werr != nil || !strings.HasPrefix(got, want) {
				t.Fatalf("get = %s, %v\nwant %s…", got, werr, want)
			}
			got, werr = jsonReq(t, nc, "iii.fn.state.update", `{"scope":"num","key":"`+key+`","ops":[{"type":"set","path":"","value":[`+tc.json+`]}]}`)
			if want := `{"old_value":` + tc.stored + `,"new_value":[` + tc.stored + `]}`; werr != nil || got != want {
				t.Fatalf("update = %s, %v\nwant %s", got, werr, want)
			}
			got, werr = jsonReq(t, nc, "iii.fn.state.list", `{"scope":"num","prefix":"`+key+`"}`)
			if want := `{"items":[{"key":"` + key + `","value":[` + tc.stored + `],"revision":`; werr != nil || !strings.HasPrefix(got, want) {
				t.Fatalf("list = %s, %v\nwant %s…", got, werr, want)
			}
			got, werr = jsonReq(t, nc, "iii.fn.state.delete", `{"scope":"num","key":"`+key+`"}`)
			if want := `{"old_value":[` + tc.stored + `]}`; werr != nil || got != want {
				t.Fatalf("delete = %s, %v\nwant %s", got, werr, want)
			}
		})
		t.Run(tc.name+"/msgpack", func(t *testing.T) {
			key := tc.name + "/msgpack"
			args := map[string]any{"scope": "num", "key": key}
			set, err := engine.Call[state.ChangeResponse](ctx, caller, state.FnSet, map[string]any{"scope": "num", "key": key, "value": tc.value})
			if err != nil || set.OldValue != nil || typed(set.NewValue) != tc.want {
				t.Fatalf("set = %s, %v; want %s", typed(set.NewValue), err, tc.want)
			}
			get, err := engine.Call[state.GetResponse](ctx, caller, state.FnGet, args)
			if err != nil || typed(get.Value) != tc.want {
				t.Fatalf("get = %s, %v; want %s", typed(get.Value), err, tc.want)
			}
			list, err := engine.Call[state.ListResponse](ctx, caller, state.FnList, map[string]any{"scope": "num", "prefix": key, "limit": 1})
			if err != nil || len(list.Items) != 1 || typed(list.Items[0].Value) != tc.want {
				t.Fatalf("list = %+v, %v; want %s", list, err, tc.want)
			}
			upd, err := engine.Call[state.ChangeResponse](ctx, caller, state.FnUpdate, map[string]any{
				"scope": "num", "key": key, "ops": []state.Op{state.Set("", []any{tc.value})}})
			if err != nil || typed(upd.OldValue) != tc.want || typed(upd.NewValue) != "["+tc.want+"]" {
				t.Fatalf("update = %s -> %s, %v; want %s", typed(upd.OldValue), typed(upd.NewValue), err, tc.want)
			}
			// The stored JSON keeps the digits; the Go API reads them exact.
			kvkey, err := subjects.StateKVKey("num", key)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := v.store.KeyValue().Get(ctx, kvkey)
			if err != nil {
				t.Fatal(err)
			}
			if string(raw.Value()) != "["+tc.stored+"]" {
				t.Fatalf("stored %s, want [%s]", raw.Value(), tc.stored)
			}
			got, _, err := v.store.Get(ctx, "num", key)
			if err != nil || typed(got) != "["+tc.want+"]" {
				t.Fatalf("Store.Get = %s, %v", typed(got), err)
			}
			items, err := v.store.List(ctx, "num", key)
			if err != nil || len(items) != 1 || typed(items[0].Value) != "["+tc.want+"]" {
				t.Fatalf("Store.List = %+v, %v", items, err)
			}
		})
	}
	// Trigger events carry the created values exact, to a Go callback and
	// to a function called with msgpack.
	enginetest.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(fromFunc) < 2*len(numberCases) {
			return fmt.Errorf("%d of %d events", len(fromFunc), 2*len(numberCases))
		}
		return nil
	})
	fromCall := map[string]string{}
	for _, ev := range rec.waitEvents(t, 4*len(numberCases)) { // created and updated
		if ev.EventType == state.EventCreated {
			fromCall[ev.Key] = typed(ev.NewValue)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, tc := range numberCases {
		for _, c := range []string{"json", "msgpack"} {
			key := tc.name + "/" + c
			if fromFunc[key] != tc.want || fromCall[key] != tc.want {
				t.Errorf("%s: events carry %s (callback) and %s (function), want %s", key, fromFunc[key], fromCall[key], tc.want)
			}
		}
	}
}

// TestStoreReadsOldValues: values stored before numbers were exact (by this
// store or a foreign client) read as they always did, with integers now
// integers and a float-looking number still a float.
func TestStoreReadsOldValues(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	tests := []struct{ stored, want string }{
		{`12345678901234568`, `12345678901234568`}, // an id the old code rounded stays as rounded
		{`{"f":1.5,"n":3}`, `{"f":1.5f,"n":3}`},
		{`1e+300`, `1e+300f`},
		{`2.0`, `2f`},
		{`-0`, `0`},
		{`18446744073709551616`, `1.8446744073709552e+19f`}, // past uint64: a float
		{` [1, 2.5e3] `, `[1,2500f]`},
		{`1e400`, `"1e400"`}, // past float64: not JSON json.Unmarshal reads, so a string
		{`not json`, `"not json"`},
	}
	serve(t, v)
	nc := enginetest.Connect(t, v.ns)
	for i, tt := range tests {
		key := fmt.Sprintf("k%d", i)
		if _, err := v.store.KeyValue().Put(ctx, "old."+key, []byte(tt.stored)); err != nil {
			t.Fatal(err)
		}
		got, _, err := v.store.Get(ctx, "old", key)
		if err != nil || typed(got) != tt.want {
			t.Errorf("stored %s reads %s, %v; want %s", tt.stored, typed(got), err, tt.want)
		}
		// state::get and state::list answer the same.
		get, werr := jsonReq(t, nc, "iii.fn.state.get", `{"scope":"old","key":"`+key+`"}`)
		if werr != nil {
			t.Fatal(werr)
		}
		list, werr := jsonReq(t, nc, "iii.fn.state.list", `{"scope":"old","prefix":"`+key+`"}`)
		if werr != nil {
			t.Fatal(werr)
		}
		value := strings.TrimSuffix(strings.TrimPrefix(get, `{"value":`), `,"revision":`+fmt.Sprint(i+1)+`}`)
		if want := `{"items":[{"key":"` + key + `","value":` + value + `,"revision":` + fmt.Sprint(i+1) + `}]}`; list != want {
			t.Errorf("stored %s: list %s, want %s (get %s)", tt.stored, list, want, get)
		}
	}
}

// TestFunctionsListCodecs: a list reply, put together from items encoded
// one by one, decodes in both codecs, short pages and long (more than 15
// items: a longer msgpack array header), truncated or not.
func TestFunctionsListCodecs(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	serve(t, v)
	nc := enginetest.Connect(t, v.ns)
	caller := enginetest.NewEngine(t, v.ns)
	ctx := testCtx(t)
	const keys = 20
	for i := range keys {
		if _, _, err := v.store.Set(ctx, "c", fmt.Sprintf("k%02d", i), map[string]any{"i": i, "id": uint64(math.MaxUint64) - uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []int{0, 7, 16} {
		var viaJSON, viaMsgpack []string
		after := ""
		for {
			resp, err := engine.Call[state.ListResponse](ctx, caller, state.FnList, map[string]any{"scope": "c", "after": after, "limit": limit})
			if err != nil {
				t.Fatal(err)
			}
			if want := limit > 0 && len(viaMsgpack)+len(resp.Items) < keys; resp.Truncated != want || (limit > 0 && len(resp.Items) > limit) {
				t.Fatalf("limit %d after %q: %d items, truncated %v", limit, after, len(resp.Items), resp.Truncated)
			}
			for _, it := range resp.Items {
				viaMsgpack = append(viaMsgpack, it.Key+"="+typed(it.Value))
			}
			if !resp.Truncated {
				break
			}
			after = resp.Items[len(resp.Items)-1].Key
		}
		for after = ""; ; {
			body, _ := json.Marshal(map[string]any{"scope": "c", "after": after, "limit": limit})
			got, werr := jsonReq(t, nc, "iii.fn.state.list", string(body))
			if werr != nil {
				t.Fatal(werr)
			}
			var resp struct {
				Items []struct {
					Key   string          `json:"key"`
					Value json.RawMessage `json:"value"`
				} `json:"items"`
				Truncated bool `json:"truncated"`
			}
			if err := json.Unmarshal([]byte(got), &resp); err != nil {
				t.Fatal(err)
			}
			for _, it := range resp.Items {
				viaJSON = append(viaJSON, it.Key+"="+typedJSON(t, string(it.Value)))
			}
			if !resp.Truncated {
				break
			}
			after = resp.Items[len(resp.Items)-1].Key
		}
		if len(viaMsgpack) != keys || strings.Join(viaMsgpack, " ") != strings.Join(viaJSON, " ") {
			t.Fatalf("limit %d: msgpack %v\njson %v", limit, viaMsgpack, viaJSON)
		}
		if want := `k19={"i":19,"id":18446744073709551596}`; viaMsgpack[keys-1] != want {
			t.Fatalf("last item %s, want %s", viaMsgpack[keys-1], want)
		}
	}
}

// TestFunctionsIncrementExact: state::update increments integers exactly
// from JSON and msgpack callers, and refuses an overflow with
// invalid_payload, writing nothing.
func TestFunctionsIncrementExact(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	serve(t, v)
	nc := enginetest.Connect(t, v.ns)
	caller := enginetest.NewEngine(t, v.ns)
	ctx := testCtx(t)
	tests := []struct {
		name, start, ops, want string // want "" for invalid_payload
	}{
		{"2^53+1 plus 1", `9007199254740993`, `[{"type":"increment"}]`, `9007199254740994`},
		{"by 2^53+1", `null`, `[{"type":"increment","by":9007199254740993}]`, `9007199254740993`},
		{"past int64", `9223372036854775807`, `[{"type":"increment"}]`, `9223372036854775808`},
		{"uint64 back to int64", `9223372036854775808`, `[{"type":"decrement","by":2}]`, `9223372036854775806`},
		{"to max uint64", `18446744073709551614`, `[{"type":"increment"}]`, `18446744073709551615`},
		{"negative", `-12345678901234567`, `[{"type":"decrement","by":10}]`, `-12345678901234577`},
		// A float on either side is float64 arithmetic, rounding as
		// documented; the result is stored, and read, as its JSON says.
		{"float by", `9007199254740993`, `[{"type":"increment","by":0.5}]`, `9007199254740992`},
		{"float target", `1.5`, `[{"type":"increment","by":12345678901234567}]`, `12345678901234570`},
		{"float result", `1.25`, `[{"type":"increment","by":0.25}]`, `1.5`},
		{"max uint64 overflow", `18446744073709551615`, `[{"type":"increment"}]`, ``},
		{"min int64 overflow", `-9223372036854775808`, `[{"type":"decrement"}]`, ``},
		{"by max uint64 below zero", `0`, `[{"type":"decrement","by":18446744073709551615}]`, ``},
		{"float overflow", `1.7976931348623157e308`, `[{"type":"increment","by":1.7976931348623157e308}]`, ``},
	}
	for i, tt := range tests {
		for _, c := range []string{"json", "msgpack"} {
			key := fmt.Sprintf("k%d-%s", i, c)
			if got, werr := jsonReq(t, nc, "iii.fn.state.set", `{"scope":"inc","key":"`+key+`","value":`+tt.start+`}`); werr != nil {
				t.Fatalf("%s: set: %s, %v", tt.name, got, werr)
			}
			before := v.msgs(t)
			var got string
			var err error
			if c == "json" {
				var werr *wire.Error
				got, werr = jsonReq(t, nc, "iii.fn.state.update", `{"scope":"inc","key":"`+key+`","ops":`+tt.ops+`}`)
				if werr != nil {
					err = werr
				}
			} else {
				var ops []state.Op
				if err := json.Unmarshal([]byte(tt.ops), &ops); err != nil {
					t.Fatal(err)
				}
				var resp state.ChangeResponse
				resp, err = engine.Call[state.ChangeResponse](ctx, caller, state.FnUpdate, map[string]any{"scope": "inc", "key": key, "ops": ops})
				got = typed(resp.NewValue)
			}
			if tt.want == "" {
				if !errors.Is(err, wire.ErrInvalidPayload) {
					t.Errorf("%s/%s = %s, %v; want invalid_payload", tt.name, c, got, err)
				}
				if after := v.msgs(t); after != before {
					t.Errorf("%s/%s: a refused update wrote %d messages", tt.name, c, after-before)
				}
				continue
			}
			want := `{"old_value":` + tt.start + `,"new_value":` + tt.want + `}`
			if c == "msgpack" {
				want = typedJSON(t, tt.want)
			}
			if err != nil || got != want {
				t.Errorf("%s/%s = %s, %v; want %s", tt.name, c, got, err, want)
			}
		}
	}
}

// TestStoreSetNumberOutOfRange: a Go value whose JSON holds a number past
// float64's range is refused, not stored to read back as a string.
func TestStoreSetNumberOutOfRange(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	before := v.msgs(t)
	_, _, err := v.store.Set(ctx, "s", "k", map[string]any{"n": json.Number("1e400")})
	if !errors.Is(err, wire.ErrInvalidPayload) || !errors.Is(err, state.ErrInvalidValue) {
		t.Fatalf("Set 1e400 = %v, want invalid_payload wrapping ErrInvalidValue", err)
	}
	if v.msgs(t) != before {
		t.Fatal("a refused Set wrote")
	}
	// An exact json.Number is fine, and keeps its digits.
	_, got, err := v.store.Set(ctx, "s", "k", map[string]any{"n": json.Number("12345678901234567")})
	if err != nil || typed(got) != `{"n":12345678901234567}` {
		t.Fatalf("Set json.Number = %s, %v", typed(got), err)
	}
}

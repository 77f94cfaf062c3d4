package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

func TestExactNumbers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		err      error
	}{
		{`1234567890123456789`, `int64(1234567890123456789)`, nil},
		{`18446744073709551615`, `uint64(18446744073709551615)`, nil},
		{`-9223372036854775808`, `int64(-9223372036854775808)`, nil},
		{`1.5`, `float64(1.5)`, nil},
		{`1e2`, `float64(100)`, nil},
		{`{"a":[1,{"b":2.5}],"c":"x"}`, `map[string]interface {}{"a":[]interface {}{1, map[string]interface {}{"b":2.5}}, "c":"x"}`, nil},
		{`[1e400]`, ``, wire.ErrNumberRange},
	} {
		dec := json.NewDecoder(bytes.NewReader([]byte(tc.in)))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		got, err := wire.ExactNumbers(v)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: err %v, want %v", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprintf("%T(%v)", got, got) != tc.want && fmt.Sprintf("%#v", got) != tc.want {
			t.Errorf("%s: %T(%v) (%#v), %v; want %s", tc.in, got, got, got, err, tc.want)
		}
	}
}

// FuzzExactNumbers: any JSON decodes with exact numbers without a panic,
// and re-encodes to JSON that json.Unmarshal reads as it read the input.
func FuzzExactNumbers(f *testing.F) {
	for _, s := range []string{`1`, `{"a":[1,2.5,"x",null,true]}`, `18446744073709551616`, `[1e400]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		dec := json.NewDecoder(bytes.NewReader([]byte(s)))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		got, err := wire.ExactNumbers(v)
		if err != nil {
			return
		}
		b, err := json.Marshal(got)
		if err != nil {
			t.Fatalf("%q: re-encode: %v", s, err)
		}
		var before, after any
		if json.Unmarshal([]byte(s), &before) != nil {
			return
		}
		if err := json.Unmarshal(b, &after); err != nil || !reflect.DeepEqual(before, after) {
			t.Fatalf("%q: re-encoded %s reads %v, the input %v (%v)", s, b, after, before, err)
		}
	})
}

package hooks

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/hook"
)

// The response schema lists each field of the answer (hook.Result) once:
// a duplicated key is still valid JSON, so json.Valid does not see it,
// and a field added to the answer must be described.
func TestResponseSchemaMatchesResult(t *testing.T) {
	t.Parallel()
	dec := json.NewDecoder(strings.NewReader(publishCollectResponseSchema))
	var keys []string
	depth, inProps := 0, false
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
			} else {
				depth--
				if depth == 1 {
					inProps = false
				}
			}
		case string:
			if depth == 1 && v == "properties" {
				inProps = true
			} else if inProps && depth == 2 && dec.More() {
				keys = append(keys, v)
				// Skip the property's value.
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	var want []string
	rt := reflect.TypeFor[hook.Result]()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			want = append(want, name)
		}
	}
	slices.Sort(want)
	got := slices.Clone(keys)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("schema properties %v, want hook.Result's fields %v", keys, want)
	}
}

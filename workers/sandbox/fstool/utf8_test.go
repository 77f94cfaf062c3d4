//go:build linux

package fstool

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// invalidStrings lists the strings of v (a result struct) that are not
// valid UTF-8, by field path.
func invalidStrings(v reflect.Value, at string) []string {
	switch v.Kind() {
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return []string{at + "=" + strings.ToValidUTF8(v.String(), "?")}
		}
	case reflect.Struct:
		var bad []string
		for i := range v.NumField() {
			bad = append(bad, invalidStrings(v.Field(i), at+"."+v.Type().Field(i).Name)...)
		}
		return bad
	case reflect.Slice:
		var bad []string
		for i := range v.Len() {
			bad = append(bad, invalidStrings(v.Index(i), at+"[]")...)
		}
		return bad
	}
	return nil
}

// callMsgpack runs fn as a msgpack caller on the bus would (msgpack
// strings carry any bytes) and returns the handler's own answer, before
// any encoder could mend it.
func callMsgpack(t *testing.T, fn engine.Function, req any) (any, error) {
	t.Helper()
	data, err := wire.Msgpack.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return fn.Handler(context.Background(), &engine.Request{FunctionID: fn.ID, Data: data, Codec: wire.Msgpack})
}

// Every string of every answer is valid UTF-8 (a msgpack str must be),
// whatever bytes the names and contents on the disk hold: the binary
// check sees only a file's head, and Linux names are any bytes.
func TestAnswersAreUTF8(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	mustWrite(t, filepath.Join(f.root, "bad\xffname.txt"), "needle\n")
	mustWrite(t, filepath.Join(f.root, "late.txt"), strings.Repeat("text\n", 3000)+"needle caf\xe9 \xff\n")
	for _, tc := range []struct {
		name string
		id   string
		req  any
		want []string // some strings the answer holds
	}{
		{"ls names", LsFunction, LsRequest{}, []string{"bad\uFFFDname.txt"}},
		{"glob matches", GlobFunction, GlobRequest{Pattern: "*.txt"}, []string{"bad\uFFFDname.txt"}},
		{"grep paths", GrepFunction, GrepRequest{Pattern: "^needle$"}, []string{"bad\uFFFDname.txt"}},
		{"grep text past the head", GrepFunction, GrepRequest{Pattern: "needle caf", Path: "late.txt"}, []string{"needle caf\uFFFD \uFFFD"}},
		{"read text past the head", ReadFunction, ReadRequest{Path: "late.txt", Offset: 3001}, []string{"  3001\tneedle caf\uFFFD \uFFFD"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := callMsgpack(t, f.fns[tc.id], tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if bad := invalidStrings(reflect.ValueOf(res), "result"); len(bad) > 0 {
				t.Fatalf("strings that are not UTF-8: %q", bad)
			}
			var all []string
			var collect func(v reflect.Value)
			collect = func(v reflect.Value) {
				switch v.Kind() {
				case reflect.String:
					all = append(all, v.String())
				case reflect.Struct:
					for i := range v.NumField() {
						collect(v.Field(i))
					}
				case reflect.Slice:
					for i := range v.Len() {
						collect(v.Index(i))
					}
				}
			}
			collect(reflect.ValueOf(res))
			for _, w := range tc.want {
				found := false
				for _, s := range all {
					found = found || s == w
				}
				if !found {
					t.Errorf("answer %+v lacks %q", res, w)
				}
			}
		})
	}
	// A request can name only UTF-8 paths and patterns: a msgpack caller
	// sending other bytes is told so.
	for _, tc := range []struct {
		name string
		id   string
		req  any
	}{
		{"read path", ReadFunction, ReadRequest{Path: "bad\xffname.txt"}},
		{"write path", WriteFunction, WriteRequest{Path: "new\xff.txt", Content: "x"}},
		{"edit path", EditFunction, EditRequest{Path: "bad\xffname.txt", OldText: "needle", NewText: "pin"}},
		{"ls path", LsFunction, LsRequest{Path: "sub\xff"}},
		{"glob pattern", GlobFunction, GlobRequest{Pattern: "bad\xff*"}},
		{"grep glob", GrepFunction, GrepRequest{Pattern: "x", Glob: "bad\xff*"}},
	} {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			_, err := callMsgpack(t, f.fns[tc.id], tc.req)
			wantCode(t, err, wire.CodeInvalidPayload)
		})
	}
	if got := f.read(t, "bad\xffname.txt"); got != "needle\n" {
		t.Fatalf("bad\\xffname.txt holds %q", got)
	}
}

package agent

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestArgsHash(t *testing.T) {
	t.Parallel()
	decode := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	h := func(fn string, args map[string]any) string {
		s, err := ArgsHash(fn, args)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := h("fs::write", decode(`{"path":"/a","n":1,"o":{"x":[1,2]}}`))
	if !strings.HasPrefix(base, "sha256:") || len(base) != len("sha256:")+64 {
		t.Fatalf("hash %q has the wrong form", base)
	}
	tests := []struct {
		name string
		fn   string
		args string
		same bool
	}{
		{"key order", "fs::write", `{"o":{"x":[1,2]},"n":1.0,"path":"/a"}`, true},
		{"spacing", "fs::write", ` { "path" : "/a", "n" : 1, "o" : { "x" : [ 1, 2 ] } }`, true},
		{"other function", "fs::read", `{"path":"/a","n":1,"o":{"x":[1,2]}}`, false},
		{"string vs number", "fs::write", `{"path":"/a","n":"1","o":{"x":[1,2]}}`, false},
		{"list order", "fs::write", `{"path":"/a","n":1,"o":{"x":[2,1]}}`, false},
		{"extra key", "fs::write", `{"path":"/a","n":1,"o":{"x":[1,2]},"p":null}`, false},
	}
	for _, tt := range tests {
		if got := h(tt.fn, decode(tt.args)) == base; got != tt.same {
			t.Errorf("%s: equal = %v, want %v", tt.name, got, tt.same)
		}
	}
	if h("f", nil) != h("f", map[string]any{}) {
		t.Error("nil and empty args hash differently")
	}
	if _, err := ArgsHash("f", map[string]any{"c": make(chan int)}); err == nil {
		t.Error("unencodable args hashed")
	}
}

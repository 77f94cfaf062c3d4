package main

import (
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/workers/traces"
)

// printSpan marks the roots the trace store made of spans whose parent it
// does not hold, and of spans it detached to bound the tree's depth.
func TestPrintSpanMarksRoots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		node traces.TreeNode
		want string
	}{
		{"root", traces.TreeNode{Span: traces.Span{Name: "run"}}, "run 0.00 ms\n"},
		{"missing parent", traces.TreeNode{Span: traces.Span{Name: "call"}, MissingParent: true}, "call 0.00 ms (parent not stored)\n"},
		{"detached", traces.TreeNode{Span: traces.Span{Name: "deep"}, Detached: true}, "deep 0.00 ms (detached: its parent is 100 levels deep)\n"},
	} {
		var b strings.Builder
		printSpan(&b, &tc.node, 0)
		if b.String() != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, b.String(), tc.want)
		}
	}
}

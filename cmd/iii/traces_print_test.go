package main

import (
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/enginetest"
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

// `iii traces show` printed span names, status messages (the error text
// of a tool or a provider) and session ids raw, where the list's table
// goes through safeText; and it printed a tree the store cut as if it
// were whole.
func TestPrintTreeSafeAndSaysTruncated(t *testing.T) {
	t.Parallel()
	resp := traces.TreeResponse{
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanCount: 7000, Truncated: true,
		Spans: []*traces.TreeNode{{Span: traces.Span{Name: "call " + hostileText, Status: "error", StatusMessage: hostileText,
			Attributes: map[string]any{"iii.session.id": "s\x1b[2J"}}}},
	}
	var b strings.Builder
	if err := printTree(&b, resp); err != nil {
		t.Fatal(err)
	}
	terminalSafe(t, "iii traces show", b.String())
	if !strings.Contains(b.String(), "7000 spans") || !strings.Contains(b.String(), "truncated") {
		t.Fatalf("a cut tree does not say so:\n%s", b.String())
	}
}

// A negative --since is refused before any call: it listed every trace,
// as --since 0 does, without a word.
func TestTracesFlagSinceNegative(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	out, err := runIII(t, "traces", "--since", "-5m", "--nats", ns.ClientURL())
	if err == nil || !strings.Contains(err.Error(), "--since -5m0s: want 0 (all) or more") {
		t.Fatalf("traces --since -5m: %v\n%s", err, out)
	}
}

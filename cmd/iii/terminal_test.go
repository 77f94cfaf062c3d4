package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine"
)

// terminalSafe fails if out holds a byte or character a terminal would act
// on (see safeText).
func terminalSafe(t *testing.T, what, out string) {
	t.Helper()
	for _, r := range out {
		if unsafeRune(r) {
			t.Fatalf("%s prints %U raw:\n%q", what, r, out)
		}
	}
}

// Every client command prints what others wrote (function results, a
// worker's descriptions) through safeText, as chat does: `iii trigger`
// printed a result's C1 and bidi characters raw (JSON escapes only C0);
// `iii functions` printed a
// worker's description raw. The JSON printed still decodes to the same
// value.
func TestClientCommandsPrintSafely(t *testing.T) {
	a := startTestApp(t)
	url := a.node.ClientURL()
	w, err := a.e.Worker("hostile_text")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "hostile_text::get", Description: "evil " + hostileText, Handler: func(context.Context, *engine.Request) (any, error) {
		return map[string]string{"text": hostileText}, nil
	}}); err != nil {
		t.Fatal(err)
	}

	out, err := runIII(t, "trigger", "hostile_text::get", "{}", "--nats", url)
	if err != nil {
		t.Fatal(err)
	}
	terminalSafe(t, "iii trigger", out)
	var got map[string]string
	if err := json.Unmarshal([]byte(out), &got); err != nil || got["text"] != hostileText {
		t.Fatalf("iii trigger's JSON decodes to %q (%v), want the function's text", got["text"], err)
	}

	for _, args := range [][]string{{"functions"}, {"functions", "--json"}, {"workers"}} {
		out, err := runIII(t, append(args, "--nats", url)...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "hostile_text") {
			t.Fatalf("iii %v does not list the function:\n%s", args, out)
		}
		terminalSafe(t, "iii "+strings.Join(args, " "), out)
	}
}

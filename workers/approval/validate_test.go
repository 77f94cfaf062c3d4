package approval

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

var (
	goodHash = "sha256:" + strings.Repeat("ab", 32)
	long     = strings.Repeat("x", 129)
)

// badSessionIDs are refused by every function.
var badSessionIDs = []string{"", "a.b.c", ".b", "a.", "a*", "a>", "a b", "a/b", "a\tb", "é", long}

// badCallIDs are refused by approval::resolve.
var badCallIDs = []string{"", "a.b", "a*", "a>", "a b", "a/b", "a\tb", "a\nb", "a\x00b", "a\u00a0b", "\xff", long}

func TestResolveValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	key, rev := park(t, f.approvals, record(t, "s1", "call_1", "fs::write", map[string]any{"path": "/x"}, 1))
	ok := ResolveRequest{SessionID: "s1", FunctionCallID: "call_1", Decision: agent.DecisionAllow}

	var cases []ResolveRequest
	for _, sid := range badSessionIDs {
		r := ok
		r.SessionID = sid
		cases = append(cases, r)
	}
	for _, id := range badCallIDs {
		r := ok
		r.FunctionCallID = id
		cases = append(cases, r)
	}
	for _, d := range []string{"", "ALLOW", "approve", "yes", "allow "} {
		r := ok
		r.Decision = d
		cases = append(cases, r)
	}
	for _, h := range []string{"sha256:", "sha256", "md5:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("a", 63),
		"sha256:" + strings.Repeat("a", 65), "sha256:" + strings.Repeat("g", 64), "SHA256:" + strings.Repeat("a", 64),
		" sha256:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("a", 63) + "\n"} {
		r := ok
		r.ArgsHash = h
		cases = append(cases, r)
	}
	for _, reason := range []string{strings.Repeat("r", MaxReasonBytes+1), "bad \xff utf-8"} {
		r := ok
		r.Reason = reason
		cases = append(cases, r)
	}
	for _, r := range cases {
		if err := r.Validate(); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("Validate(%+.60v) = %v, want invalid_payload", r, err)
		}
		if err := resolve(ctx, f.e, r); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("resolve(%+.60v) = %v, want invalid_payload", r, err)
		}
	}
	// Nothing was written: the parked record is untouched and alone.
	if rec, _, r := stored(t, f.approvals, key); r != rev || rec.Status != agent.ApprovalPending {
		t.Fatalf("record changed: %+v rev %d (was %d)", rec, r, rev)
	}
	if n := values(t, f.approvals); n != 1 {
		t.Fatalf("%d values in the approvals bucket, want 1", n)
	}
	// The boundaries are accepted.
	good := ok
	good.Reason = strings.Repeat("é", MaxReasonBytes/2)
	good.ArgsHash = "sha256:" + strings.Repeat("Ab", 32)
	good.FunctionCallID = "toolu_01-ÄÖ:x=y+z"
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", good, err)
	}
}

func TestListPendingValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, sid := range badSessionIDs[1:] { // "" lists every session
		_, err := engine.Call[ListPendingResponse](context.Background(), f.e, ListPendingFunction, ListPendingRequest{SessionID: sid})
		if !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("list_pending(%q) = %v, want invalid_payload", sid, err)
		}
	}
}

func TestSettingsValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, sid := range badSessionIDs {
		if _, err := engine.Call[agent.ApprovalSettings](ctx, f.e, SettingsGetFunction, SettingsGetRequest{SessionID: sid}); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("settings::get(%q) = %v, want invalid_payload", sid, err)
		}
		mode := agent.ApprovalAuto
		if _, err := engine.Call[agent.ApprovalSettings](ctx, f.e, SettingsSetFunction, SettingsSetRequest{SessionID: sid, Mode: &mode}); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("settings::set(%q) = %v, want invalid_payload", sid, err)
		}
	}
	tooMany := make([]string, MaxAlwaysAllow+1)
	for i := range tooMany {
		tooMany[i] = "fs::read" // duplicates still count: the bound is on the request
	}
	mode := func(m string) *agent.ApprovalMode { am := agent.ApprovalMode(m); return &am }
	list := func(p ...string) *[]string { return &p }
	for _, r := range []SettingsSetRequest{
		{SessionID: "s1", Mode: mode("")},
		{SessionID: "s1", Mode: mode("MANUAL")},
		{SessionID: "s1", Mode: mode("yolo")},
		{SessionID: "s1", AlwaysAllow: list("*")},
		{SessionID: "s1", AlwaysAllow: list("fs::read", "*")},
		{SessionID: "s1", AlwaysAllow: list("")},
		{SessionID: "s1", AlwaysAllow: list("fs::read ")},
		{SessionID: "s1", AlwaysAllow: list("fs::read\n")},
		{SessionID: "s1", AlwaysAllow: list("fs\x00read")},
		{SessionID: "s1", AlwaysAllow: list("fs::\xff")},
		{SessionID: "s1", AlwaysAllow: list(strings.Repeat("a", 257))},
		{SessionID: "s1", AlwaysAllow: &tooMany},
		{SessionID: "s1", Mode: mode("full"), AlwaysAllow: list("*")}, // one bad field spoils the request
	} {
		if _, err := engine.Call[agent.ApprovalSettings](ctx, f.e, SettingsSetFunction, r); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("settings::set(%+.80v) = %v, want invalid_payload", r, err)
		}
	}
	if n := values(t, f.settings); n != 0 {
		t.Fatalf("%d values in the settings bucket after refused writes", n)
	}
}

package sandbox

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Sandbox ids round-trip, and parsing never panics nor accepts an id
// whose session part is not a valid session id (a plain id, or
// "<region>.<name>" with exactly one dot). Whatever parses is one safe
// path element: no '/', not "." or "..", at most one dot, not first.
func FuzzSandboxID(f *testing.F) {
	for _, s := range []string{"s1_abcdefghij", "a_b_0123456789", "", "_", "x_ABCDEFGHIJ", "../x_abcdefghij",
		"eu.s1_abcdefghij", "eu..s1_abcdefghij", ".s1_abcdefghij", "eu.s1.x_abcdefghij"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if subjects.ValidateSessionID(s) == nil {
			if got, err := parseSandboxID(newSandboxID(s)); err != nil || got != s {
				t.Fatalf("round trip of %q: %q %v", s, got, err)
			}
		}
		sid, err := parseSandboxID(s)
		if err != nil {
			return
		}
		if subjects.ValidateSessionID(sid) != nil || !strings.HasPrefix(s, sid+"_") || len(s)-len(sid)-1 != idSuffixLen {
			t.Fatalf("%q parsed to %q", s, sid)
		}
		if strings.Contains(s, "/") || strings.Count(s, ".") > 1 || strings.HasPrefix(s, ".") || !filepath.IsLocal(s) ||
			strings.Contains(s[len(sid):], ".") {
			t.Fatalf("%q parsed, but is no safe path element", s)
		}
	})
}

// Requests decode and validate without panics, from JSON and msgpack;
// whatever validates has exactly one of command and argv.
func FuzzExecRequest(f *testing.F) {
	for _, s := range []string{
		`{"sandbox_id":"s_abcdefghij","command":"ls"}`,
		`{"sandbox_id":"s_abcdefghij","argv":["a","b"],"env":{"A":"b"},"stdin":"x","timeout_ms":5}`,
		`{"command":"x","argv":[]}`, `{"env":{"1":"x"}}`, `[]`, `{`, `{"timeout_ms":1e99}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
			var req ExecRequest
			if codec.Unmarshal(b, &req) != nil {
				continue
			}
			if req.Validate() == nil {
				if (req.Command.Command == "") == (len(req.Argv) == 0) {
					t.Fatalf("validated %+v", req)
				}
				if len(req.Command.argv()) == 0 {
					t.Fatalf("no argv for %+v", req)
				}
			}
			var c CreateRequest
			if codec.Unmarshal(b, &c) == nil && c.Validate() == nil {
				if _, err := c.Limits.resolve(DefaultLimits, MaxLimits); err == nil && c.SessionID == "" {
					t.Fatalf("validated %+v", c)
				}
			}
			var d DestroyRequest
			if codec.Unmarshal(b, &d) == nil && d.Validate() == nil && (d.SandboxID == "") == (d.SessionID == "") {
				t.Fatalf("validated %+v", d)
			}
		}
	})
}

// The settings parser never panics; what it accepts builds.
func FuzzSettings(f *testing.F) {
	f.Add("idle_ttl", "30m", "max_pids", "64")
	f.Add("root", "x", "uid", "0")
	f.Add("default_memory_mb", "99999999999999999999", "node", "")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		opts, err := parseSettings(map[string]string{k1: v1, k2: v2}, "/home")
		if err != nil {
			return
		}
		_, _ = buildOptions(opts)
	})
}

// /proc/<pid>/stat parsing never panics.
func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 1 0 0 0 1 2 0 0 20 0 1 0 5 1000 100"))
	f.Add([]byte("2 ()) R 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseProcStat(b)
		if err == nil && st.ppid < 0 {
			t.Fatalf("%q: %+v", b, st)
		}
	})
}

// Records decode only when they name a sandbox of their own session.
func FuzzDecodeRecord(f *testing.F) {
	good, _ := json.Marshal(Sandbox{SandboxID: "s_abcdefghij", SessionID: "s"})
	f.Add(good)
	regional, _ := json.Marshal(Sandbox{SandboxID: "eu.s1_abcdefghij", SessionID: "eu.s1"})
	f.Add(regional)
	f.Add([]byte(`{"sandbox_id":"s_abcdefghij","session_id":"t"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeRecord(b)
		if err != nil {
			return
		}
		if sid, err := parseSandboxID(rec.SandboxID); err != nil || sid != rec.SessionID {
			t.Fatalf("decoded %+v", rec)
		}
	})
}

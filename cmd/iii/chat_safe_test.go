package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine/enginetest"
)

// unsafeOutput says what in out could act on a terminal instead of
// showing: a control character other than \n and \t (C0, DEL, C1), a
// bidi override or isolate, or bytes that are not UTF-8 (a terminal may
// read a lone byte 0x80-0x9f as a C1 control).
func unsafeOutput(out string) error {
	if !utf8.ValidString(out) {
		return fmt.Errorf("not UTF-8: %q", out)
	}
	for i, r := range out {
		if r == '\n' || r == '\t' {
			continue
		}
		if r < 0x20 || r == 0x7f || 0x80 <= r && r <= 0x9f || 0x202a <= r && r <= 0x202e || 0x2066 <= r && r <= 0x2069 {
			return fmt.Errorf("%U at byte %d: %q", r, i, out)
		}
	}
	return nil
}

func TestSafeText(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"plain", "hello, wörld ✓ 日本", "hello, wörld ✓ 日本"},
		{"newline and tab", "a\n\tb\n", "a\n\tb\n"},
		{"CRLF", "a\r\nb\r\n", "a\nb\n"},
		{"bare CR", "safe\rEVIL", `safe\rEVIL`},
		{"CR at the end", "a\r", `a\r`},
		{"OSC 52 clipboard", "\x1b]52;c;cm0gLXJmIH4=\x07", `\x1b]52;c;cm0gLXJmIH4=\a`},
		{"OSC 8 link", "\x1b]8;;http://evil\x1b\\here\x1b]8;;\x1b\\", `\x1b]8;;http://evil\x1b\here\x1b]8;;\x1b\`},
		{"title", "\x1b]0;pwned\x1b\\", `\x1b]0;pwned\x1b\`},
		{"CSI", "\x1b[2J\x1b[1;1H\x1b[8mhidden", `\x1b[2J\x1b[1;1H\x1b[8mhidden`},
		{"other C0", "\x00\x01\b\f\v\x1f", `\x00\x01\b\f\v\x1f`},
		{"DEL", "a\x7fb", `a\u007fb`},
		{"C1 CSI", "\u009b31m", `\u009b31m`},
		{"C1 range", "\u0080\u0085\u009f", `\u0080\u0085\u009f`},
		{"bidi overrides", "\u202a\u202b\u202c\u202d\u202e", `\u202a\u202b\u202c\u202d\u202e`},
		{"bidi isolates", "\u2066\u2067\u2068\u2069", `\u2066\u2067\u2068\u2069`},
		{"not bidi controls", "\u2029\u2065\u206a\u200f", "\u2029\u2065\u206a\u200f"},
		{"invalid UTF-8", "a\xffb\xc3", "a\ufffdb\ufffd"},
		{"encoded C1 byte alone", "\x9b31m", "\ufffd31m"},
		{"backslashes stay", `\x1b \n`, `\x1b \n`},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := safeText(tc.in)
			if got != tc.want {
				t.Fatalf("safeText(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if err := unsafeOutput(got); err != nil {
				t.Fatal(err)
			}
			if again := safeText(got); again != got {
				t.Fatalf("safeText is not idempotent: %q then %q", got, again)
			}
		})
	}
}

// Whatever text comes, and however it is cut into writes (deltas), what
// reaches the terminal holds no control but \n and \t, no bidi control and
// only UTF-8; text with nothing to hide passes unchanged.
func FuzzSafeText(f *testing.F) {
	for _, s := range []string{"", "plain", "a\r\nb", "\x1b]52;c;eA==\x07", "\u009b2J", "\u202eevil", "\xe2\x80", "\xe2\x80\xae", "é"} {
		f.Add(s, uint(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, s string, cut uint) {
		var out bytes.Buffer
		w := safeWriter{&out}
		at := int(cut % uint(len(s)+1))
		for _, part := range []string{s[:at], s[at:]} {
			if n, err := io.WriteString(w, part); err != nil || n != len(part) {
				t.Fatalf("write %q: %d, %v", part, n, err)
			}
		}
		if err := unsafeOutput(out.String()); err != nil {
			t.Fatalf("for %q cut at %d: %v", s, at, err)
		}
		if got := safeText(s); unsafeOutput(s) == nil && !strings.Contains(s, "\r") && got != s {
			t.Fatalf("safeText(%q) = %q, want it unchanged", s, got)
		}
	})
}

// hostileText is a message that the echo model answers with itself: what
// a model, or a web page a tool fetched, could send to take over a
// terminal.
const hostileText = "clip\x1b]52;c;cm0gLXJmIH4=\x07 link\x1b]8;;http://evil/\x1b\\here\x1b]8;;\x1b\\ title\x1b]0;pwned\x07" +
	" csi\x1b[2J\x1b[8m over\rwrite c1\u009b31m bidi\u202eevil\u2066x\u2069 del\x7f nul\x00 end"

// A scripted model answer holding terminal escapes (split over deltas of
// one byte, so every sequence is cut up), a function call whose arguments
// and result hold C1 and bidi controls, and a provider error holding
// escapes: chat used to print them raw, so a model could write the user's
// clipboard (OSC 52), plant links, retitle the terminal, clear or hide
// text. In -m mode and line mode alike, every one must show as text.
func TestChatNeutralisesModelText(t *testing.T) {
	t.Parallel()
	a := startTestAppWith(t, upConfig{httpAddr: "127.0.0.1:0", settings: map[string]map[string]string{
		"provider-scripted": {"delta_size": "1"},
	}})
	url := a.node.ClientURL()
	// A value a model may read back: JSON escapes its C0 controls, not C1
	// or bidi ones.
	if out, err := runIII(t, "trigger", "--nats", url, "state::set", `{"scope":"s","key":"k\u202e","value":"\u009b\u202e\u001b]52;c;eA==\u0007"}`); err != nil {
		t.Fatalf("state::set: %v\n%s", err, out)
	}
	call := `/call state::get {"scope":"s","key":"k\u202e"}`
	turns := []struct {
		name string
		text string // one line: line mode sends it as typed
		want []string
	}{
		{"answer", hostileText, []string{
			`clip\x1b]52;c;cm0gLXJmIH4=\a link\x1b]8;;http://evil/\x1b\here\x1b]8;;\x1b\ title\x1b]0;pwned\a` +
				` csi\x1b[2J\x1b[8m over\rwrite c1\u009b31m bidi\u202eevil\u2066x\u2069 del\u007f nul\x00 end`,
		}},
		{"call", call, []string{`→ state::get {"key":"k\u202e","scope":"s"}`, `"value":"\u009b\u202e\u001b]52;c;eA==\u0007"`}},
		{"error", "/fail permanent \x1b]52;c;eA==\x07\u202e", []string{`\x1b]52;c;eA==\a\u202e`}},
	}
	for _, mode := range []string{"message", "lines"} {
		for _, turn := range turns {
			t.Run(mode+"/"+turn.name, func(t *testing.T) {
				t.Parallel()
				sid := "chat_hostile_" + mode + "_" + turn.name
				var out string
				switch mode {
				case "message":
					var err error
					out, err = runIII(t, "chat", "--nats", url, "--session", sid, "-m", turn.text)
					if err != nil && turn.name != "error" {
						t.Fatalf("chat: %v\n%s", err, out)
					}
				case "lines":
					var buf enginetest.Buffer
					cmd := newRootCmd()
					cmd.SetOut(&buf)
					cmd.SetErr(&buf)
					cmd.SetIn(strings.NewReader(turn.text + "\n"))
					cmd.SetArgs([]string{"chat", "--nats", url, "--session", sid})
					if err := cmd.ExecuteContext(context.Background()); err != nil {
						t.Fatalf("chat: %v\n%s", err, buf.String())
					}
					out = buf.String()
				}
				if err := unsafeOutput(out); err != nil {
					t.Fatalf("chat printed a control: %v", err)
				}
				for _, w := range turn.want {
					if !strings.Contains(out, w) {
						t.Fatalf("chat output lacks %s:\n%s", w, out)
					}
				}
			})
		}
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"abcdef", 3, "abc…"},
		{"abc", 3, "abc"},
		{"aé", 2, "a…"},
		{"✓✓", 4, "✓…"},
		{"✓✓", 2, "…"},
	}
	for _, tc := range tests {
		if got := clip(tc.in, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// The error that ends chat is shown through safeText too, and still is
// the error it wraps.
func TestChatErrorShownSafely(t *testing.T) {
	t.Parallel()
	out, err := runIII(t, "chat", "--embedded=false", "-m", "hi", "--nats", "nats://127.0.0.1:1/evil\u202e\u009b")
	if err == nil {
		t.Fatalf("chat connected:\n%s", out)
	}
	if e := unsafeOutput(err.Error()); e != nil {
		t.Fatal(e)
	}
	if !strings.Contains(err.Error(), `127.0.0.1:1/evil\u202e\u009b`) {
		t.Fatalf("the error does not say where chat tried: %v", err)
	}
}
